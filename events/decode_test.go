package events_test

import (
	"encoding/json"
	"reflect"
	"testing"

	"github.com/loopgate/loopgate/events"
)

// Event.Decode decodes with the JSON v2 implementation in its v1 mode; it
// must give what encoding/json gives, for every payload of a real run and
// for whatever a fuzzer makes of them.
func FuzzDecodeAgreesWithEncodingJSON(f *testing.F) {
	for _, e := range happyRun(f) {
		f.Add(string(e.Type), []byte(e.Data))
	}
	f.Fuzz(func(t *testing.T, typ string, data []byte) {
		for _, newV := range payloads {
			got, want := newV(), newV()
			e := events.Event{Type: events.Type(typ), Data: data}
			gotErr := e.Decode(got)
			wantErr := json.Unmarshal(data, want)
			if (gotErr == nil) != (wantErr == nil) {
				t.Fatalf("Decode(%q) into %T: error %v, encoding/json: %v", data, got, gotErr, wantErr)
			}
			if gotErr == nil && !reflect.DeepEqual(got, want) {
				t.Fatalf("Decode(%q) into %T:\n got %#v\nwant %#v", data, got, got, want)
			}
		}
	})
}

// payloads make the payload types Fold decodes into.
var payloads = []func() any{
	func() any { return new(events.StartedData) },
	func() any { return new(events.ProposedData) },
	func() any { return new(events.ValidatedData) },
	func() any { return new(events.ApprovalRequestedData) },
	func() any { return new(events.ApprovedData) },
	func() any { return new(events.ExecutingData) },
	func() any { return new(events.ExecutedData) },
	func() any { return new(events.ObservedData) },
	func() any { return new(events.FinishedData) },
	func() any { return new(events.Event) },
	func() any { return new(any) },
}
