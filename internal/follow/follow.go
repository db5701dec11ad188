// Package follow consumes a stream's messages live, in order and each
// once, through the death of the nats-server that holds the consumer.
//
// Followers of LOOPGATE_EVENTS (loopgate bench, which answers its runs'
// approvals from what it follows; submit, audit --follow, approve and the
// demo, through journal.Watch) used nats.go's ordered consumer as it is.
// An ordered consumer lives on one server; when that server is killed,
// nats.go notices after two missed heartbeats (5 s each by default) and
// then makes the consumer again, each try waiting up to 10 s for an
// answer, with a backoff of 1, 2, 4, 8 s between tries: after JetStream
// was away for 3 s it came back 9 to 12 s later
// (TestAFollowerOutlastsAJetStreamThatIsAway), and every run parked on the
// bench's answers waited with it. Stream heartbeats every second, lets
// nats.go try one reset, and otherwise makes the consumer again itself,
// from the message after the last it handled, every retryEvery until one
// is made (0.26 s after JetStream came back).
package follow

import (
	"context"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

const (
	heartbeat = time.Second
	expiry    = 3 * time.Second
	// retryEvery is how soon a consumer that could not be made is tried
	// again.
	retryEvery = 250 * time.Millisecond
	// tryFor bounds one try at making a consumer: while JetStream does not
	// answer, a request waits this long, not nats.go's 5 s default.
	tryFor = time.Second
	// inactive: a consumer retired, or left behind on a server that came
	// back, goes 30 s after its last pull, not nats.go's 5 minutes.
	inactive = 30 * time.Second
	// dropFor bounds the deletion of the last consumer at the end.
	dropFor = 2 * time.Second
)

// Stream calls handle for every message of stream on filters from stream
// seq from, with its stream seq, in stream order, each once, until ctx ends or stop is called;
// handle is never called concurrently. The first consumer is made before
// Stream returns (an error then is returned); any later one is made again
// for as long as it takes. stop deletes the last consumer.
func Stream(ctx context.Context, js jetstream.JetStream, stream string, filters []string, from uint64, handle func(msg jetstream.Msg, streamSeq uint64)) (stop func(), err error) {
	f := &follower{js: js, stream: stream, filters: filters, handle: handle, lost: make(chan struct{}, 1), last: max(from, 1) - 1}
	if err := f.consume(ctx, max(from, 1)); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		f.watch(ctx)
	}()
	return func() {
		cancel()
		<-done
		f.ccMu.Lock()
		cons, cc := f.cons, f.cc
		f.ccMu.Unlock()
		retire(cc)
		f.drop(cons)
	}, nil
}

// follower consumes the messages of a stream on some subjects, in stream
// order, each once, across the ordered consumers it makes.
type follower struct {
	js      jetstream.JetStream
	stream  string
	filters []string
	handle  func(jetstream.Msg, uint64)

	lost chan struct{} // the consumer stopped answering: make another

	mu   sync.Mutex // serializes handle across consumers
	last uint64     // stream seq of the last message handled

	ccMu sync.Mutex
	cons jetstream.Consumer
	cc   jetstream.ConsumeContext
	gen  int // counts the consumers made; only the current one's errors count
}

// retire stops cc without waiting: nats.go's Stop waits for the ordered
// consumer's lock, which its own reset holds for as long as a try takes
// (up to 10 s while JetStream does not answer). Until it stops, a message
// cc still hands on is one the follower has handled or hands on in order
// (see onMessage).
func retire(cc jetstream.ConsumeContext) {
	go cc.Stop()
}

// drop deletes cons's consumer on the server, best effort: the inactive
// threshold reaps it otherwise.
func (f *follower) drop(cons jetstream.Consumer) {
	info := cons.CachedInfo()
	if info == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), dropFor)
	defer cancel()
	_ = f.js.DeleteConsumer(ctx, f.stream, info.Name)
}

// consume makes an ordered consumer from stream seq from and starts it.
func (f *follower) consume(ctx context.Context, from uint64) error {
	cons, err := f.js.OrderedConsumer(ctx, f.stream, jetstream.OrderedConsumerConfig{
		FilterSubjects:    f.filters,
		DeliverPolicy:     jetstream.DeliverByStartSequencePolicy,
		OptStartSeq:       from,
		MaxResetAttempts:  1,
		InactiveThreshold: inactive,
	})
	if err != nil {
		return err
	}
	f.ccMu.Lock()
	f.gen++
	gen := f.gen
	f.ccMu.Unlock()
	cc, err := cons.Consume(f.onMessage,
		jetstream.PullExpiry(expiry), jetstream.PullHeartbeat(heartbeat),
		jetstream.ConsumeErrHandler(func(jetstream.ConsumeContext, error) {
			// A missed heartbeat, a consumer gone, a reset that failed:
			// whatever nats.go does next, a consumer made again from the
			// last message handled loses nothing. A retired consumer's
			// errors (its own reset ending late) say nothing of the
			// current one.
			f.ccMu.Lock()
			current := gen == f.gen
			f.ccMu.Unlock()
			if !current {
				return
			}
			select {
			case f.lost <- struct{}{}:
			default:
			}
		}))
	if err != nil {
		return err
	}
	f.ccMu.Lock()
	f.cons, f.cc = cons, cc
	f.ccMu.Unlock()
	return nil
}

// onMessage hands msg on unless it was handled already. Each consumer
// hands on its messages in stream order without a gap, from where it
// started; a retired one may still hand some on while the next does, and
// of the two streams of messages only what comes after the last handled
// goes on: in order, each once, none skipped.
func (f *follower) onMessage(msg jetstream.Msg) {
	md, err := msg.Metadata()
	if err != nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if md.Sequence.Stream <= f.last {
		return
	}
	f.last = md.Sequence.Stream
	f.handle(msg, f.last)
}

// watch makes the consumer again whenever it is lost, until ctx ends.
func (f *follower) watch(ctx context.Context) {
	var retry <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-f.lost:
		case <-retry:
		}
		retry = nil
		f.ccMu.Lock()
		cons, cc := f.cons, f.cc
		f.ccMu.Unlock()
		retire(cc)
		go f.drop(cons)
		f.mu.Lock()
		from := f.last + 1
		f.mu.Unlock()
		try, cancel := context.WithTimeout(ctx, tryFor)
		err := f.consume(try, from)
		cancel()
		if err != nil {
			retry = time.After(retryEvery)
		}
	}
}
