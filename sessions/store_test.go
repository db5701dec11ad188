package sessions_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/sessions"
)

func testStore(t *testing.T) *sessions.Store {
	t.Helper()
	env := natstest.Start(t)
	kv, err := env.JS.KeyValue(t.Context(), journal.BucketSessions)
	if err != nil {
		t.Fatal(err)
	}
	return sessions.NewStore(kv)
}

func exchange(runID, q, a string) []events.SessionTurn {
	return []events.SessionTurn{{RunID: runID, Role: "user", Text: q}, {RunID: runID, Role: "assistant", Text: a}}
}

// Runs of one session that finish together each record their exchange by
// compare-and-set, and every one is kept, with a summarizer that takes a
// moment (the documented use is a model call). Record used to give up
// after five tries without a pause: here two or three of the eight
// exchanges were dropped, although nothing was wrong but contention.
func TestConcurrentRecordsOfOneSessionAreAllKept(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	slow := sessions.SummarizerFunc(func(ctx context.Context, prev string, turns []events.SessionTurn) (string, error) {
		select {
		case <-time.After(30 * time.Millisecond): // a (fast) model call
		case <-ctx.Done():
			return "", ctx.Err()
		}
		return sessions.Clip.Summarize(ctx, prev, turns)
	})
	const runs = 8
	var wg sync.WaitGroup
	errs := make([]error, runs)
	start := make(chan struct{})
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			id := fmt.Sprintf("run-%d", i)
			errs[i] = st.Record(t.Context(), "cityops", "desk-1", id, exchange(id, "question "+id, "answer "+id),
				nil, 200, slow, time.Now())
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("run-%d's exchange was not recorded: %v", i, err)
		}
	}
	s, _, err := st.Get(t.Context(), "cityops", "desk-1")
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != runs {
		t.Errorf("the session remembers %d of %d runs: %v", len(s.Runs), runs, s.Runs)
	}
}

// Constraints are merged into the session run after run. Runs that each
// add a few (well within the task schema's 32 x 1 KiB) used to push the
// session past its budget for good, as constraints were never dropped:
// from then on every run's exchange was folded away at once (the next run
// saw no turns at all), and the entry grew until the KV refused it, after
// which no run of the session was recorded. Now the constraints set
// longest ago go before the newest exchange does.
func TestConstraintsDoNotGrowASessionPastItsBudget(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	const budget = 8192
	overBudget, recordFailed := false, false
	for i := range 50 {
		// Ten runs with 2 KB of constraints each, then runs with the
		// most a task may carry.
		n, size := 4, 500
		if i >= 10 {
			n, size = 32, 1000
		}
		cons := map[string]string{}
		for k := range n {
			cons[fmt.Sprintf("r%02d_k%02d", i, k)] = strings.Repeat("c", size)
		}
		id := fmt.Sprintf("run-%02d", i)
		if err := st.Record(t.Context(), "cityops", "desk-2", id, exchange(id, "question "+id, "answer "+id),
			cons, budget, sessions.Clip, time.Now()); err != nil {
			if !recordFailed {
				t.Errorf("run %d of the session could not be recorded (every later one fails too): %v", i, err)
			}
			recordFailed = true
			continue
		}
		s, _, err := st.Get(t.Context(), "cityops", "desk-2")
		if err != nil {
			t.Fatal(err)
		}
		if (s.Size() > budget || len(s.Turns) == 0) && !overBudget {
			overBudget = true
			t.Errorf("after run %d the session is %d bytes (budget %d) with %d turns: constraints outgrew the budget and wiped the latest exchange",
				i, s.Size(), budget, len(s.Turns))
		}
	}
}

// When constraints alone outgrow the budget, those set longest ago are
// dropped first, whole, and a key set again counts as new.
func TestCompactDropsTheConstraintsSetLongestAgo(t *testing.T) {
	t.Parallel()
	st := testStore(t)
	big := strings.Repeat("c", 3000)
	for i, cons := range []map[string]string{{"a": big}, {"b": big}, {"c": big}, {"a": big}} {
		id := fmt.Sprintf("run-%d", i)
		if err := st.Record(t.Context(), "cityops", "desk-order", id, exchange(id, "q", "a"), cons, 8192, sessions.Clip, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	s, _, err := st.Get(t.Context(), "cityops", "desk-order")
	if err != nil {
		t.Fatal(err)
	}
	// Set in the order a, b, c, a: b is the oldest now.
	if _, ok := s.Constraints["b"]; ok || len(s.Constraints) != 2 || s.Constraints["a"] != big || s.Constraints["c"] != big {
		t.Errorf("constraints %v (order %v), want a and c kept whole and b dropped", slices.Sorted(maps.Keys(s.Constraints)), s.ConstraintOrder)
	}
	if n := len(s.Turns); n == 0 || s.Turns[n-1].RunID != "run-3" || s.Size() > 8192 {
		t.Errorf("the session is %d bytes with turns %+v; want the newest exchange kept within the budget", s.Size(), s.Turns)
	}
}
