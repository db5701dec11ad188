//go:build soak

package soak

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/journal"
)

// Throwaway: journal.Load on a 3-node cluster, many times: how many stall.
func TestZZProbeLoadStalls(t *testing.T) {
	base := t.TempDir()
	nodes := startCluster(t, base, logDir(t), 3)
	ctx := context.Background()
	_, js0 := connect(t, clientURLs(nodes))
	if err := journal.Ensure(ctx, js0, journal.Layout{Replicas: 3}); err != nil {
		t.Fatal(err)
	}
	j0, _ := journal.New(ctx, js0)
	var runs []string
	for r := range 16 {
		runID := events.RunID(tenant, fmt.Sprintf("probe-%d", r))
		runs = append(runs, runID)
		var last uint64
		var err error
		for i := range 20 {
			e := events.Event{EventID: events.UUIDv7.NewEventID(), RunID: runID, Tenant: tenant, Seq: uint64(i + 1), Type: events.TypeObserved, Time: time.Now().UTC(), Data: json.RawMessage(`{"x":1}`)}
			if last, err = j0.Append(ctx, last, e); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, nd := range nodes {
		_, js := connect(t, []string{nd.clientURL})
		j, _ := journal.New(ctx, js)
		var mu sync.Mutex
		var ds []time.Duration
		stalls := 0
		var wg sync.WaitGroup
		for g := range 4 {
			wg.Go(func() {
				for k := range 75 {
					a := time.Now()
					if _, _, err := j.Load(ctx, tenant, runs[(g*5+k)%len(runs)]); err != nil {
						t.Error(err)
					}
					d := time.Since(a)
					mu.Lock()
					ds = append(ds, d)
					if d > 5*time.Second {
						stalls++
					}
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		t.Logf("connected to %s: %d loads, %d took over 5s: %s", nd.name, len(ds), stalls, spread(ds))
	}
}
