package bench_test

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// BenchmarkExpirySchedules measures what questions' expiry schedules hold
// in the server (JetStream message scheduling keeps every pending schedule
// in memory) as questions keep being asked and answered: 30 rounds of
// 10,000 questions, each scheduling its expiry an hour ahead, on subjects
// shaped like loopgate's. With cancel=true each round's schedules are then
// cancelled the way a decision cancels them (worker cancelExpiry: a rollup
// of the subject that is no schedule and ages out in a second), as their
// questions are answered. The server runs in this process; the figure is
// its heap in use after a GC, over the idle server's, per question asked.
func BenchmarkExpirySchedules(b *testing.B) {
	const rounds, perRound = 30, 10_000
	for _, cancel := range []bool{false, true} {
		b.Run(fmt.Sprintf("cancel=%t", cancel), func(b *testing.B) {
			for b.Loop() {
				env := natstest.StartWith(b, natstest.Options{SyncInterval: "2m"})
				settle := func() uint64 {
					select {
					case <-env.JS.PublishAsyncComplete():
					case <-time.After(time.Minute):
						b.Fatal("publishes not acknowledged")
					}
					runtime.GC()
					var ms runtime.MemStats
					runtime.ReadMemStats(&ms)
					return ms.HeapInuse
				}
				publish := func(m *nats.Msg) {
					for {
						_, err := env.JS.PublishMsgAsync(m)
						if errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
							// The server is behind (a slow disk): let it
							// catch up rather than fail the measure.
							settle()
							continue
						}
						if err != nil {
							b.Fatal(err)
						}
						return
					}
				}
				before := settle()
				at := time.Now().Add(time.Hour).UTC().Truncate(time.Second).Format(time.RFC3339)
				for r := range rounds {
					subject := func(i int) string {
						return fmt.Sprintf("%s.bench.%08d-0000-4000-8000-%012d.s1c1", journal.SchedulesPrefix, i, r)
					}
					for i := range perRound {
						m := nats.NewMsg(subject(i))
						m.Header.Set("Nats-Schedule", "@at "+at)
						m.Header.Set("Nats-Schedule-Target", fmt.Sprintf("loopgate.resume.bench.%08d-0000-4000-8000-%012d", i, r))
						publish(m)
					}
					settle()
					if !cancel {
						continue
					}
					for i := range perRound {
						m := nats.NewMsg(subject(i))
						m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
						m.Header.Set(jetstream.MsgTTLHeader, "1s")
						publish(m)
					}
					settle()
				}
				time.Sleep(2 * time.Second) // the cancels' one-second TTL
				after := settle()
				st, err := env.JS.Stream(b.Context(), journal.StreamWork)
				if err != nil {
					b.Fatal(err)
				}
				info, err := st.Info(b.Context())
				if err != nil {
					b.Fatal(err)
				}
				want := uint64(rounds * perRound)
				if cancel {
					want = 0
				}
				if info.State.Msgs != want {
					b.Fatalf("%d messages in %s, want %d", info.State.Msgs, journal.StreamWork, want)
				}
				b.ReportMetric(float64(int64(after)-int64(before))/(rounds*perRound), "server-B/question")
			}
		})
	}
}
