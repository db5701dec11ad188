package events_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// BenchmarkFoldHappyRun folds the 37 events of the CityOps happy path
// (testdata/happy_run.json, as the stream stored them): what every read of
// such a run costs the worker besides the read itself.
func BenchmarkFoldHappyRun(b *testing.B) {
	evs := happyRun(b)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.Fold(evs); err != nil {
			b.Fatal(err)
		}
	}
}

// happyRun is the CityOps happy path's events as the stream stored them:
// 37 events, three approvals, recorded from one run of the worker test
// harness (the setup of worker's TestHappyPathDraftsThreeEscalations).
func happyRun(tb testing.TB) []events.Event {
	tb.Helper()
	data, err := os.ReadFile("testdata/happy_run.json")
	if err != nil {
		tb.Fatal(err)
	}
	var evs []events.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		tb.Fatal(err)
	}
	return evs
}
