package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/natsd"
)

func TestJetStreamBusyTellsWaitingFromFailing(t *testing.T) {
	busy := []error{
		fmt.Errorf("nats: connect: %w", nats.ErrNoServers),
		fmt.Errorf("journal: ensure stream LOOPGATE_WORK: %w", context.DeadlineExceeded),
		nats.ErrTimeout,
		nats.ErrNoResponders,
		&jetstream.APIError{Code: 503, ErrorCode: 10008, Description: "JetStream system temporarily unavailable"},
		// A server of the cluster down, not joined yet, or just started and
		// not yet heard from.
		fmt.Errorf("journal: ensure stream LOOPGATE_WORK: %w",
			&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, peer offline"}),
		&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement"},
	}
	for _, err := range busy {
		if !jetStreamBusy(err) {
			t.Errorf("jetStreamBusy(%v) = false, want true: waiting may help", err)
		}
	}
	failing := []error{
		jetstream.ErrJetStreamNotEnabled,
		&jetstream.APIError{Code: 503, ErrorCode: jetstream.JSErrCodeJetStreamNotEnabledForAccount},
		&jetstream.APIError{Code: 400, ErrorCode: 10058, Description: "stream name already in use with a different configuration"},
		// Servers without room, or without the tags asked for.
		&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, insufficient storage"},
		&jetstream.APIError{Code: 400, ErrorCode: 10005, Description: "no suitable peers for placement, tags not matched ['zone:b']"},
		errors.New("nats: permissions violation"),
	}
	for _, err := range failing {
		if jetStreamBusy(err) {
			t.Errorf("jetStreamBusy(%v) = true, want false: waiting will not help", err)
		}
	}
}

func TestUntilJetStreamAnswersRetriesOnlyWhatWaitingCanFix(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	calls := 0
	err := untilJetStreamAnswers(t.Context(), log, "test", func(context.Context) error {
		if calls++; calls < 3 {
			return nats.ErrTimeout
		}
		return nil
	})
	if err != nil || calls != 3 {
		t.Errorf("two timeouts, then success: err %v after %d calls, want nil after 3", err, calls)
	}

	calls = 0
	permanent := errors.New("stream name already in use with a different configuration")
	err = untilJetStreamAnswers(t.Context(), log, "test", func(context.Context) error { calls++; return permanent })
	if !errors.Is(err, permanent) || calls != 1 {
		t.Errorf("a permanent error: err %v after %d calls, want it after 1", err, calls)
	}

	ctx, cancel := context.WithCancel(t.Context())
	calls = 0
	err = untilJetStreamAnswers(ctx, log, "test", func(context.Context) error { calls++; cancel(); return nats.ErrTimeout })
	if !errors.Is(err, nats.ErrTimeout) || calls != 1 {
		t.Errorf("cancelled while waiting: err %v after %d calls, want the timeout after 1", err, calls)
	}
}

// recordingHandler passes each record's message to seen.
type recordingHandler struct {
	slog.Handler
	seen func(msg string)
}

func (recordingHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h recordingHandler) Handle(_ context.Context, r slog.Record) error {
	h.seen(r.Message)
	return nil
}

// waitingStack starts a stack with o (its logger replaced) and returns once
// the stack says it is waiting for NATS; it fails the test if the stack
// returns first. Its result arrives on the channel.
func waitingStack(t *testing.T, o stackOptions, why string) <-chan startedStack {
	t.Helper()
	waiting := make(chan struct{})
	var once sync.Once
	o.log = slog.New(recordingHandler{Handler: slog.DiscardHandler, seen: func(msg string) {
		if strings.Contains(msg, "does not answer yet") {
			once.Do(func() { close(waiting) })
		}
	}})
	done := make(chan startedStack, 1)
	go func() {
		s, err := startStack(t.Context(), o)
		done <- startedStack{s, err}
	}()
	select {
	case <-waiting:
	case r := <-done:
		t.Fatalf("with %s, startStack returned (err %v) instead of waiting", why, r.err)
	case <-time.After(30 * time.Second):
		t.Fatal("startStack neither waited nor returned")
	}
	return done
}

type startedStack struct {
	s   *stack
	err error
}

// readyStack waits for a waiting stack to start, once what it waited for
// is there; it closes the stack when the test ends.
func readyStack(t *testing.T, done <-chan startedStack, within time.Duration, after string) *stack {
	t.Helper()
	var r startedStack
	select {
	case r = <-done:
	case <-time.After(within):
		t.Fatalf("startStack did not finish within %v of %s", within, after)
	}
	if r.err != nil {
		t.Fatalf("startStack after %s: %v", after, r.err)
	}
	t.Cleanup(func() { r.s.close(context.Background()) })
	return r.s
}

// A worker started while its NATS server is down waits for the server
// instead of exiting, and is then ready like any other.
func TestWorkerWaitsForNATSToComeUp(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now

	done := waitingStack(t, stackOptions{natsURL: "nats://" + addr}, "no server up")
	srv, err := natsd.Start(natsd.Config{Listen: addr, StoreDir: t.TempDir(), SyncInterval: "2m", Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	s := readyStack(t, done, 60*time.Second, "the server starting")
	if _, err := s.js.Stream(t.Context(), journal.StreamEvents); err != nil {
		t.Errorf("the layout was not ensured once connected: %v", err)
	}
}

// A worker started with --replicas 3 while a server of its cluster has not
// joined the JetStream cluster yet (make soak met the like: workers started
// with their cluster, before every server had been heard from) waits for
// it instead of exiting, then creates the layout at three replicas.
func TestWorkerWaitsForTheServersOfItsCluster(t *testing.T) {
	c := natstest.StartClusterWith(t, natstest.ClusterOptions{NoLayout: true, JetStreamOff: []int{2}})
	probe := jetstream.StreamConfig{Name: "PROBE", Subjects: []string{"probe"}, Replicas: 3}
	var apiErr *jetstream.APIError
	if _, err := c.JS.CreateStream(t.Context(), probe); !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeNoPeers {
		t.Fatalf("an R3 stream on two JetStream servers of three: %v, want no suitable peers for placement", err)
	}

	done := waitingStack(t, stackOptions{natsURL: c.Servers[0].ClientURL() + "," + c.Servers[1].ClientURL(), replicas: 3},
		"a server of the cluster not in it yet")
	c.Shutdown(2)
	c.Restart(t, 2) // now with JetStream
	s := readyStack(t, done, 90*time.Second, "the third server joining")
	st, err := s.js.Stream(t.Context(), journal.StreamEvents)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().Config.Replicas; n != 3 {
		t.Errorf("%s has %d replicas, want 3", journal.StreamEvents, n)
	}
}

func TestServeDoublesGOMAXPROCSOnlyForAnEmbeddedServerThatFsyncsEveryWrite(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		embedded  bool
		sync      string
		def, want int
	}{
		{true, "", 2, 4}, // the defaults: embedded, always
		{true, "always", 1, 2},
		{true, "2m", 2, 2},
		{false, "always", 2, 2}, // the server is elsewhere
	} {
		if got := chooseProcs(c.embedded, c.sync, c.def); got != c.want {
			t.Errorf("chooseProcs(embedded %v, %q, %d) = %d, want %d", c.embedded, c.sync, c.def, got, c.want)
		}
	}
}

func TestGroupCommitIsOnWhereEveryAppendIsAnFsync(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		setting  string
		embedded bool
		sync     string
		replicas int
		want     bool
	}{
		{"auto", true, "always", 1, true},
		{"", true, "", 0, true}, // the defaults: embedded, always, one replica
		{"auto", true, "2m", 1, false},
		{"auto", true, "always", 3, false},
		{"auto", false, "always", 1, false}, // an external server's setting is unknown
		{"on", false, "2m", 3, true},
		{"off", true, "always", 1, false},
	} {
		got, err := chooseGroupCommit(c.setting, c.embedded, c.sync, c.replicas)
		if err != nil || got != c.want {
			t.Errorf("chooseGroupCommit(%q, embedded %v, %q, R%d) = %v, %v; want %v", c.setting, c.embedded, c.sync, c.replicas, got, err, c.want)
		}
	}
	if _, err := chooseGroupCommit("yes", true, "always", 1); err == nil || !strings.Contains(err.Error(), "--group-commit") {
		t.Errorf("a bad setting = %v, want an error naming --group-commit", err)
	}
}
