package events_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

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

// Event.Encode and EncodeData write with the JSON v2 implementation in its
// v1 mode, without HTML escapes; the bytes must be encoding/json's (an
// Encoder with SetEscapeHTML(false)), for every payload a run
// holds (decoded from a real run's, or from what a fuzzer makes of them)
// and for the envelope around any data. One difference is allowed
// (sameJSON): invalid UTF-8 in a string becomes U+FFFD as the character
// itself, where encoding/json writes the escape \ufffd.
func FuzzEncodeAgreesWithEncodingJSON(f *testing.F) {
	for _, e := range happyRun(f) {
		f.Add(string(e.Type), e.RunID, []byte(e.Data))
	}
	f.Add("observed", "run \u2028 <&>", []byte("{\"a\": \"\xff\", \"b\" :[1.50, 2e3]}"))
	f.Fuzz(func(t *testing.T, typ, runID string, data []byte) {
		for _, newV := range payloads {
			v := newV()
			if json.Unmarshal(data, v) != nil {
				continue
			}
			want, wantErr := marshalUnescaped(v)
			got, gotErr := events.EncodeData(v)
			if (gotErr == nil) != (wantErr == nil) || !sameJSON(got, want) {
				t.Fatalf("EncodeData(%#v):\n got %s (%v)\nwant %s (%v)", v, got, gotErr, want, wantErr)
			}
		}
		e := events.Event{EventID: runID, RunID: runID, Tenant: typ, Seq: uint64(len(data)), Type: events.Type(typ),
			Time: time.Unix(int64(len(runID)), int64(len(data))), Step: len(typ), CallID: typ, Tool: runID, Data: data}
		want, wantErr := marshalUnescaped(&e)
		got, gotErr := e.Encode()
		if (gotErr == nil) != (wantErr == nil) || !sameJSON(got, want) {
			t.Fatalf("Encode(%#v):\n got %s (%v)\nwant %s (%v)", e, got, gotErr, want, wantErr)
		}
	})
}

// marshalUnescaped is what Encode and EncodeData must write: encoding/json
// with SetEscapeHTML(false), without the Encoder's newline.
func marshalUnescaped(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// sameJSON reports whether got is want, but for U+FFFD written as itself
// where want has \ufffd (both read back as the same string).
func sameJSON(got, want []byte) bool {
	return string(got) == strings.ReplaceAll(string(want), `\ufffd`, "\ufffd")
}
