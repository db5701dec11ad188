//go:build soak

package soak

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Throwaway: what one journal.Load costs on the 3-node cluster vs one node.
func TestZZProbeLoadCost(t *testing.T) {
	base := t.TempDir()
	nodes := startCluster(t, base, logDir(t), 3)
	_, js := connect(t, clientURLs(nodes))
	ctx := context.Background()
	for _, r := range []int{1, 3} {
		name := fmt.Sprintf("PROBE_R%d", r)
		st, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{name + ".>"}, Replicas: r, Storage: jetstream.FileStorage})
		if err != nil {
			t.Fatal(err)
		}
		for i := range 37 {
			if _, err := js.Publish(ctx, fmt.Sprintf("%s.run.%d", name, i), []byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second)
		var pub, last, ordered, drop, create time.Duration
		const n = 40
		for range n {
			a := time.Now()
			if _, err := js.Publish(ctx, name+".run.x", []byte("y")); err != nil {
				t.Fatal(err)
			}
			b := time.Now()
			if _, err := st.GetLastMsgForSubject(ctx, name+".run.*"); err != nil {
				t.Fatal(err)
			}
			c := time.Now()
			cons, err := st.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{name + ".run.*"}, InactiveThreshold: 10 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			c2 := time.Now()
			for {
				m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
				if err != nil {
					t.Fatal(err)
				}
				md, _ := m.Metadata()
				if md.NumPending == 0 {
					break
				}
			}
			d := time.Now()
			create += c2.Sub(c)
			_ = js.DeleteConsumer(ctx, name, cons.CachedInfo().Name)
			e := time.Now()
			pub += b.Sub(a)
			last += c.Sub(b)
			ordered += d.Sub(c)
			drop += e.Sub(d)
		}
		t.Logf("R%d stream on 3 nodes (sync always): publish %s, get-last %s, ordered consumer create %s, create+read %s, consumer delete %s (means of %d)",
			r, pub/n, last/n, create/n, ordered/n, drop/n, n)
	}
}
