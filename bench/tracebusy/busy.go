// Command tracebusy reads a Go execution trace (go test -trace, or
// runtime/trace) and prints, for each goroutine whose stack ever shows a
// function matching -match, how its time was spent: running, runnable
// (ready but waiting for a CPU), in a system call, and waiting (blocked),
// with the call sites it spent the most time blocked or in system calls at.
//
// It answers a question pprof cannot: is a serial loop (nats-server's
// per-stream (*stream).internalLoop, say) the bottleneck, and if so, is it
// computing, waiting for a CPU, or waiting for the disk?
//
//	go test -run '^$' -bench 'BenchmarkLoopgate/sync=always/approval=required/conc=64/pools=1$' \
//	    -benchtime 4x -trace /tmp/lg.trace ./bench
//	go run ./bench/tracebusy -match internalLoop /tmp/lg.trace
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"golang.org/x/exp/trace"
)

// Goroutine is the time one goroutine spent in each state over the trace.
type Goroutine struct {
	ID       int64
	Func     string // the matching function its stack showed
	Running  time.Duration
	Runnable time.Duration
	Syscall  time.Duration
	Waiting  time.Duration
	// Sites is where it spent its time blocked or in system calls: the
	// state, the runtime's reason and the innermost frames, most time first.
	Sites []Site
}

// Busy is the time the goroutine was not blocked.
func (g Goroutine) Busy() time.Duration { return g.Running + g.Runnable + g.Syscall }

// Site is one place a goroutine blocked or made system calls.
type Site struct {
	Where string
	Time  time.Duration
}

// goroutine is a Goroutine being accumulated.
type goroutine struct {
	Goroutine
	state trace.GoState
	since trace.Time // when it entered state; 0: not seen yet
	site  string     // where it blocked or entered a system call
	sites map[string]time.Duration
}

// Analyze reads a trace and returns the goroutines whose stacks showed a
// function containing match, busiest first, and the span of the trace.
func Analyze(r io.Reader, match string) ([]Goroutine, time.Duration, error) {
	tr, err := trace.NewReader(r)
	if err != nil {
		return nil, 0, fmt.Errorf("read trace: %w", err)
	}
	all := map[trace.GoID]*goroutine{}
	var first, last trace.Time
	for {
		ev, err := tr.ReadEvent()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, 0, fmt.Errorf("read trace: %w", err)
		}
		if first == 0 {
			first = ev.Time()
		}
		last = ev.Time()
		if ev.Kind() != trace.EventStateTransition {
			continue
		}
		st := ev.StateTransition()
		if st.Resource.Kind != trace.ResourceGoroutine {
			continue
		}
		id := st.Resource.Goroutine()
		g := all[id]
		if g == nil {
			g = &goroutine{Goroutine: Goroutine{ID: int64(id)}, sites: map[string]time.Duration{}}
			all[id] = g
		}
		from, to := st.Goroutine()
		if g.since != 0 && g.state == from {
			g.add(from, time.Duration(ev.Time()-g.since))
		}
		g.state, g.since = to, ev.Time()
		if to == trace.GoWaiting || to == trace.GoSyscall {
			g.site = site(to, st)
		}
		if g.Func == "" {
			for f := range st.Stack.Frames() {
				if strings.Contains(f.Func, match) {
					g.Func = f.Func
					break
				}
			}
		}
	}
	var out []Goroutine
	for _, g := range all {
		if g.Func == "" {
			continue
		}
		for where, d := range g.sites {
			g.Sites = append(g.Sites, Site{Where: where, Time: d})
		}
		slices.SortFunc(g.Sites, func(a, b Site) int { return cmp.Compare(b.Time, a.Time) })
		out = append(out, g.Goroutine)
	}
	slices.SortFunc(out, func(a, b Goroutine) int { return cmp.Compare(b.Busy(), a.Busy()) })
	return out, time.Duration(last - first), nil
}

func (g *goroutine) add(s trace.GoState, d time.Duration) {
	switch s {
	case trace.GoRunning:
		g.Running += d
	case trace.GoRunnable:
		g.Runnable += d
	case trace.GoSyscall:
		g.Syscall += d
		g.sites[g.site] += d
	case trace.GoWaiting:
		g.Waiting += d
		g.sites[g.site] += d
	}
}

// site names where a goroutine blocked or entered a system call: the
// state, the runtime's reason, the innermost frame (the call that blocked)
// and the three innermost frames outside the standard library (who made it).
func site(to trace.GoState, st trace.StateTransition) string {
	var call string
	var callers []string
	for f := range st.Stack.Frames() {
		if call == "" {
			call = f.Func
			continue
		}
		if std(f.Func) {
			continue
		}
		callers = append(callers, strings.TrimPrefix(f.Func, "github.com/nats-io/nats-server/v2/server."))
		if len(callers) == 3 {
			break
		}
	}
	where := strings.ToLower(to.String())
	if st.Reason != "" {
		where += " (" + st.Reason + ")"
	}
	return where + " " + call + " ← " + strings.Join(callers, " ← ")
}

// std reports whether fn is a function of the standard library (or the
// runtime): its import path has no domain, and it is not package main.
func std(fn string) bool {
	first, _, nested := strings.Cut(fn, "/")
	if !nested {
		return !strings.HasPrefix(fn, "main.")
	}
	return !strings.Contains(first, ".")
}

func main() {
	match := flag.String("match", "internalLoop", "report goroutines whose stack shows a function containing this")
	top := flag.Int("top", 8, "goroutines to report, busiest first")
	sites := flag.Int("sites", 4, "blocking and system-call sites to report per goroutine")
	flag.Usage = func() {
		fmt.Fprintln(flag.CommandLine.Output(), "usage: tracebusy [-match func] [-top n] [-sites n] trace.out")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() != 1 {
		flag.Usage()
		os.Exit(2)
	}
	f, err := os.Open(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracebusy:", err)
		os.Exit(1)
	}
	defer f.Close()
	gs, span, err := Analyze(f, *match)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracebusy:", err)
		os.Exit(1)
	}
	fmt.Printf("trace span %v; %d goroutines matched %q\n", span.Round(time.Millisecond), len(gs), *match)
	pct := func(d time.Duration) float64 { return 100 * float64(d) / float64(max(span, 1)) }
	for i, g := range gs {
		if i == *top {
			break
		}
		fmt.Printf("goroutine %d %s: busy %.0f%% (running %.0f%%, runnable %.0f%%, syscall %.0f%%), waiting %.0f%%\n",
			g.ID, g.Func, pct(g.Busy()), pct(g.Running), pct(g.Runnable), pct(g.Syscall), pct(g.Waiting))
		for j, s := range g.Sites {
			if j == *sites {
				break
			}
			fmt.Printf("    %5.1f%%  %s\n", pct(s.Time), s.Where)
		}
	}
}
