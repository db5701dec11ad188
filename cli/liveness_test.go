package cli

import (
	"context"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natsconn"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

// A worker's connection to a server that stops answering without closing
// it (a frozen server, a network path that drops everything) is given up
// within seconds, said in the log with its cause, and made again, rather
// than kept for the 4 to 6 minutes nats.go's default pings take to notice
// (make soak's TestAFrozenServerIsLeft: 0 of 200 runs finished in the
// 90 s after a freeze). The server here is real; between it and the
// worker sits a TCP relay that stops relaying the connections it already
// has, as a frozen process would, and relays new ones.
func TestAWorkerLeavesAConnectionThatStopsAnswering(t *testing.T) {
	t.Parallel() // mostly waiting for pings
	_, relay := stallableServer(t)
	var (
		mu   sync.Mutex
		seen []string
	)
	log := slog.New(recordingHandler{Handler: slog.DiscardHandler, seen: func(msg string) {
		mu.Lock()
		seen = append(seen, msg)
		mu.Unlock()
	}})
	s, err := startStack(t.Context(), stackOptions{natsURL: "nats://" + relay.addr(), log: log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.close(context.Background())

	leavesWhenStalled(t, s.nc, relay)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := s.js.AccountInfo(ctx); err != nil {
		t.Errorf("JetStream after the reconnection: %v", err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, want := range []string{"nats: lost the connection to the server; reconnecting", "nats: reconnected"} {
		if !slices.Contains(seen, want) {
			t.Errorf("the log never said %q; it said %q", want, seen)
		}
	}
}

// So does a client command's (connect): `bench` and `audit --follow` run
// for as long as the operator wants.
func TestACommandLeavesAConnectionThatStopsAnswering(t *testing.T) {
	t.Parallel()
	srv, relay := stallableServer(t)
	direct, err := srv.Connect()
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	djs, err := jetstream.New(direct)
	if err != nil {
		t.Fatal(err)
	}
	if err := journal.Ensure(t.Context(), djs, journal.Layout{}); err != nil {
		t.Fatal(err)
	}
	nc, js, _, err := connect(t.Context(), "nats://"+relay.addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	leavesWhenStalled(t, nc, relay)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := js.AccountInfo(ctx); err != nil {
		t.Errorf("JetStream after the reconnection: %v", err)
	}
}

// stallableServer starts a real server and a stallingRelay in front of it.
func stallableServer(t *testing.T) (*natsd.Server, *stallingRelay) {
	t.Helper()
	srv, err := natsd.Start(natsd.Config{Listen: "127.0.0.1:0", StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Shutdown)
	return srv, startStallingRelay(t, strings.TrimPrefix(srv.ClientURL(), "nats://"))
}

// leavesWhenStalled stalls the relay's connections and waits for nc to
// have given its connection up and made another.
func leavesWhenStalled(t *testing.T, nc *nats.Conn, relay *stallingRelay) {
	t.Helper()
	relay.stallAll()
	stalled := time.Now()
	// Detection takes MaxPingsOut to MaxPingsOut+1 ping intervals, and
	// the reconnection up to nats.go's 2 s wait; the bound leaves room for
	// a loaded machine and is far below nats.go's default pings (4-6 min).
	within := 4 * time.Duration(natsconn.MaxPingsOut+1) * natsconn.PingInterval
	for nc.Stats().Reconnects == 0 || !nc.IsConnected() {
		if time.Since(stalled) > within {
			t.Fatalf("the connection was not given up and made again within %s of its server going silent", within)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("reconnected %s after the relay stalled", time.Since(stalled).Round(time.Millisecond))
}

// stallingRelay relays TCP connections to a target until stallAll, after
// which the connections it holds stay open and relay nothing more, either
// way; connections made later are relayed as before.
type stallingRelay struct {
	l      net.Listener
	target string
	done   chan struct{}

	mu    sync.Mutex
	pairs []*relayed
}

type relayed struct {
	stalled      atomic.Bool
	client, upst net.Conn
}

func startStallingRelay(t *testing.T, target string) *stallingRelay {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &stallingRelay{l: l, target: target, done: make(chan struct{})}
	go r.accept()
	t.Cleanup(r.close)
	return r
}

func (r *stallingRelay) addr() string { return r.l.Addr().String() }

func (r *stallingRelay) accept() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", r.target)
		if err != nil {
			c.Close()
			continue
		}
		p := &relayed{client: c, upst: up}
		r.mu.Lock()
		r.pairs = append(r.pairs, p)
		r.mu.Unlock()
		go r.pipe(p, up, c)
		go r.pipe(p, c, up)
	}
}

// pipe copies src to dst until either fails, or holds what it read once
// its pair stalled.
func (r *stallingRelay) pipe(p *relayed, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.stalled.Load() {
				<-r.done
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			dst.Close()
			return
		}
	}
}

func (r *stallingRelay) stallAll() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pairs {
		p.stalled.Store(true)
	}
}

func (r *stallingRelay) close() {
	r.l.Close()
	close(r.done)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pairs {
		p.client.Close()
		p.upst.Close()
	}
}
