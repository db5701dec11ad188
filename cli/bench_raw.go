package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/wait"
	"github.com/loopgate/loopgate/journal"
)

// publishRaw publishes one conditional append, asking again (as
// journal.Append does) while a replicated stream answers 10164 "wrong last
// sequence" without a number: the leader is still clearing this writer's
// previous append, nothing was stored. Fatal before, it failed about one
// bench --raw in seven on a 3-node cluster.
func publishRaw(ctx context.Context, js jetstream.JetStream, subject string, payload []byte, last uint64) (*jetstream.PubAck, error) {
	for try := 1; ; try++ {
		ack, err := js.Publish(ctx, subject, payload, jetstream.WithExpectLastSequencePerSubject(last))
		var apiErr *jetstream.APIError
		if try >= rawInProcessTries || !errors.As(err, &apiErr) || apiErr.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequenceConstant {
			return ack, err
		}
		if werr := wait.For(ctx, time.Duration(try)*time.Millisecond); werr != nil {
			return nil, err
		}
	}
}

// rawInProcessTries is journal's inProcessTries, for the raw appends.
const rawInProcessTries = 4

// rawPayloadBytes is the size of one raw append, about a stored event's.
const rawPayloadBytes = 300

// rawResult is the physical limit loopgate's event rate is set against:
// conditional appends (each publish carries the subject's expected last
// sequence, as every append of a run does), one subject per writer.
type rawResult struct {
	Stream   string        `json:"stream"`
	Writers  int           `json:"writers"`
	Bytes    int           `json:"bytes"`
	Storage  string        `json:"storage"`
	Replicas int           `json:"replicas"`
	Appends  int64         `json:"appends"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	PerSec   float64       `json:"appends_per_sec"`
}

// measureRaw runs writers conditional appends at once for d on a scratch
// stream made like LOOPGATE_EVENTS (its storage and replicas, on the
// same servers), then deletes the stream. Each writer publishes the next
// append once the last is acknowledged, as a run's events are.
func measureRaw(ctx context.Context, js jetstream.JetStream, writers int, d time.Duration) (rawResult, error) {
	events, err := js.Stream(ctx, journal.StreamEvents)
	if err != nil {
		return rawResult{}, fmt.Errorf("stream %s: %w", journal.StreamEvents, err)
	}
	like := events.CachedInfo().Config
	id := strings.ReplaceAll(uuid.NewString()[:13], "-", "")
	name, prefix := "LOOPGATE_BENCH_RAW_"+id, "loopgate.bench."+id
	res := rawResult{Stream: name, Writers: writers, Bytes: rawPayloadBytes, Storage: like.Storage.String(), Replicas: max(like.Replicas, 1)}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name:        name,
		Description: "loopgate bench: raw conditional appends (deleted after the measure)",
		Subjects:    []string{prefix + ".>"},
		Storage:     like.Storage,
		Replicas:    like.Replicas,
		Placement:   like.Placement,
	}); err != nil {
		return res, fmt.Errorf("create the scratch stream %s: %w", name, err)
	}
	defer func() {
		// The measure's context may be over: delete with one of its own.
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		_ = js.DeleteStream(dctx, name)
	}()

	payload := []byte(strings.Repeat("x", rawPayloadBytes))
	// The writers warm up (connections, the stream's first blocks, the
	// leader's caches) for a quarter of d, at most a second, untimed, as
	// make bench's raw lines do; then d is timed.
	warmUp := min(d/4, time.Second)
	mctx, cancel := context.WithTimeout(ctx, warmUp+d)
	defer cancel()
	var (
		appends  atomic.Int64
		wg       sync.WaitGroup
		firstErr error
		errOnce  sync.Once
	)
	for w := range writers {
		wg.Go(func() {
			subject := fmt.Sprintf("%s.%d", prefix, w)
			var last uint64
			for mctx.Err() == nil {
				ack, err := publishRaw(mctx, js, subject, payload, last)
				if err != nil {
					if mctx.Err() == nil {
						errOnce.Do(func() { firstErr = err })
						cancel()
					}
					return
				}
				last = ack.Sequence
				appends.Add(1)
			}
		})
	}
	var began time.Time
	var before int64
	select {
	case <-time.After(warmUp):
		began, before = time.Now(), appends.Load()
	case <-mctx.Done():
	}
	wg.Wait()
	res.Elapsed = time.Since(began)
	res.Appends = appends.Load() - before
	if firstErr != nil {
		return res, fmt.Errorf("append to %s: %w", name, firstErr)
	}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	res.PerSec = float64(res.Appends) / res.Elapsed.Seconds()
	return res, nil
}
