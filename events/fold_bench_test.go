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
	data, err := os.ReadFile("testdata/happy_run.json")
	if err != nil {
		b.Fatal(err)
	}
	var evs []events.Event
	if err := json.Unmarshal(data, &evs); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := events.Fold(evs); err != nil {
			b.Fatal(err)
		}
	}
}
