package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	followstream "github.com/loopgate/loopgate/internal/follow"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/trail"
)

// load drives a running deployment the way its users do, from outside:
// it publishes tasks (at most conc runs in flight: a run that ends makes
// room for the next task), follows LOOPGATE_EVENTS through an ordered
// consumer (which survives a server dying), answers every question of its
// own runs as one approver once the run has parked on it, and checks each
// run's trail as its events arrive (package trail). It calls no worker
// code: what it sees is what the stream holds.
type load struct {
	js   jetstream.JetStream
	task events.Task // the template: each task gets its own task id
	// prefix makes the task ids: <prefix>-<n>.
	prefix string
	conc   int
	// approver answers the runs' questions; "" leaves them to humans.
	approver string
	// progress, if not nil, gets a line every progressEvery.
	progress      io.Writer
	progressEvery time.Duration
	key           nkeys.KeyPair // nil: unsigned

	mu       sync.Mutex
	runs     map[string]*loadRun // by run id
	order    []*loadRun          // in submission order
	slots    chan struct{}
	ended    int
	allEnded chan struct{}
	began    time.Time
	last     time.Time // the last run's end
	answered int
	refused  []string // approval messages of ours that decided nothing
	pubErrs  int      // task publishes that failed and were sent again
	ansErrs  int      // approval publishes that failed and were sent again
}

// loadRun is one task of the load and what became of it.
type loadRun struct {
	taskID, runID string
	submitted     time.Time
	ended         time.Time
	check         *trail.Check
	asked         map[string]question // call id → the latest question
	answered      map[string]int      // call id → the round answered
	executed      int
	lastType      events.Type
}

func newLoad(js jetstream.JetStream, task events.Task, prefix string, runs, conc int, approver string, key nkeys.KeyPair) *load {
	l := &load{js: js, task: task, prefix: prefix, conc: conc, approver: approver, key: key,
		runs: map[string]*loadRun{}, slots: make(chan struct{}, conc), allEnded: make(chan struct{})}
	for i := range runs {
		taskID := fmt.Sprintf("%s-%d", prefix, i+1)
		runID := events.RunID(task.Tenant, taskID)
		r := &loadRun{taskID: taskID, runID: runID, check: trail.New(task.Tenant, runID),
			asked: map[string]question{}, answered: map[string]int{}}
		l.runs[r.runID] = r
		l.order = append(l.order, r)
	}
	return l
}

// run submits every task and waits until every run ended or ctx is done
// (the report then names the runs still going).
func (l *load) run(ctx context.Context) error {
	info, err := l.js.Stream(ctx, journal.StreamEvents)
	if err != nil {
		return fmt.Errorf("stream %s: %w", journal.StreamEvents, err)
	}
	// Every event of these runs comes after the stream's last message now:
	// their task ids are new.
	stop, err := followstream.Stream(ctx, l.js, journal.StreamEvents, []string{events.EventsPrefix + "." + l.task.Tenant + ".>"},
		info.CachedInfo().State.LastSeq+1, func(m jetstream.Msg, streamSeq uint64) { l.onMessage(ctx, m, streamSeq) })
	if err != nil {
		return fmt.Errorf("follow %s: %w", journal.StreamEvents, err)
	}
	defer stop()

	l.mu.Lock()
	l.began = time.Now()
	l.mu.Unlock()
	if l.progress != nil {
		stop := l.report(ctx)
		defer stop()
	}
	for _, r := range l.order {
		select {
		case l.slots <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if err := l.submit(ctx, r); err != nil {
			return nil // ctx ended while JetStream refused the task: reported as not submitted
		}
	}
	select {
	case <-l.allEnded:
	case <-ctx.Done():
	}
	return nil
}

// report prints a line of progress every progressEvery until stop is
// called: while servers and workers are being killed, when runs stop
// ending shows as it happens.
func (l *load) report(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(l.progressEvery)
		defer tick.Stop()
		before := 0
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			l.mu.Lock()
			ended, inFlight, since := l.ended, len(l.slots), time.Since(l.began)
			l.mu.Unlock()
			fmt.Fprintf(l.progress, "  +%s  ended %d of %d (%.1f/s in the last %s), in flight %d\n",
				since.Round(time.Second), ended, len(l.order), float64(ended-before)/l.progressEvery.Seconds(), l.progressEvery, inFlight)
			before = ended
		}
	}()
	return func() { close(done); <-finished }
}

// submit publishes r's task, again and again while JetStream cannot take
// it (a server down, a cluster electing): the task id is the publish's
// Nats-Msg-Id, so a task stored twice is a run started once.
func (l *load) submit(ctx context.Context, r *loadRun) error {
	t := l.task
	t.TaskID = r.taskID
	payload, err := events.EncodeData(t)
	if err != nil {
		return err
	}
	l.mu.Lock()
	r.submitted = time.Now() // the run's time counts from the first try
	l.mu.Unlock()
	err = l.patiently(ctx, &l.pubErrs, func(ctx context.Context) error {
		_, err := l.js.Publish(ctx, events.TaskSubject(t.Tenant), payload, jetstream.WithMsgID(taskMsgID(t.Tenant, t.TaskID)))
		return err
	})
	if err != nil {
		l.mu.Lock()
		r.submitted = time.Time{} // never acknowledged: not submitted
		l.mu.Unlock()
	}
	return err
}

// patiently runs publish until it succeeds or ctx ends, each try given
// 5 s, a second apart, counting the failures in *errs.
func (l *load) patiently(ctx context.Context, errs *int, publish func(context.Context) error) error {
	for {
		try, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := publish(try)
		cancel()
		if err == nil {
			return nil
		}
		l.mu.Lock()
		*errs++
		l.mu.Unlock()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// onMessage takes one event off the stream.
func (l *load) onMessage(ctx context.Context, m jetstream.Msg, streamSeq uint64) {
	var e events.Event
	if err := json.Unmarshal(m.Data(), &e); err != nil {
		return // not an event of ours (the trail check of a run names its own bad events)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	r, ok := l.runs[e.RunID]
	if !ok {
		return // another run of the tenant
	}
	r.check.Add(trail.Stored{Event: e, StreamSeq: streamSeq, Subject: m.Subject(), MsgID: m.Headers().Get(jetstream.MsgIDHeader)})
	r.lastType = e.Type
	switch e.Type {
	case events.TypeExecuted:
		r.executed++
	case events.TypeApprovalRequested:
		var d events.ApprovalRequestedData
		if e.Decode(&d) == nil {
			r.asked[e.CallID] = questionFromEvent(e, d)
		}
	case events.TypeParked:
		var d events.ParkedData
		if e.Decode(&d) != nil || l.approver == "" {
			return
		}
		for _, id := range d.Awaiting {
			q, ok := r.asked[id]
			if !ok || r.answered[id] >= q.Round {
				continue
			}
			r.answered[id] = q.Round
			go l.answer(ctx, q)
		}
	case events.TypeApprovalRejected:
		var d events.ApprovalRejectedData
		if e.Decode(&d) == nil && d.Approver == l.approver {
			l.refused = append(l.refused, fmt.Sprintf("run %s call %s: %s's %s was refused (%s): %s", e.RunID, e.CallID, l.approver, d.Decision, d.Class, d.Detail))
		}
	case events.TypeFinished, events.TypeRejected:
		if !r.ended.IsZero() {
			return // the trail check names the second end
		}
		r.ended = time.Now()
		l.last = r.ended
		l.ended++
		select {
		case <-l.slots:
		default:
		}
		if l.ended == len(l.order) {
			close(l.allEnded)
		}
	}
}

// answer approves q (or, for an unknown outcome, abandons it: a load does
// not guess whether a write happened), as loopgate approve does.
func (l *load) answer(ctx context.Context, q question) {
	d, reason := approvals.Approve, "loopgate bench approves every call of its runs"
	if q.Kind == approvals.KindNeedsHuman {
		d, reason = approvals.Abandon, "loopgate bench does not guess whether an unknown write took effect"
	}
	msg := approvals.Message{RunID: q.RunID, CallID: q.CallID, ArgsHash: q.ArgsHash, Decision: d,
		Approver: approvals.Approver{ID: l.approver}, Reason: reason}
	// One message id per question: a decision stored whose
	// acknowledgement was lost is not stored again (and then refused as
	// deciding nothing) when it is sent again.
	msgID := fmt.Sprintf("bench/%s/%s/%d", q.RunID, q.CallID, q.Round)
	err := l.patiently(ctx, &l.ansErrs, func(ctx context.Context) error {
		_, _, _, err := sendDecision(ctx, l.js, q.Tenant, msg, l.key, msgID)
		return err
	})
	if err != nil {
		return
	}
	l.mu.Lock()
	l.answered++
	l.mu.Unlock()
}
