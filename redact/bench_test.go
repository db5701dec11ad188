package redact_test

import (
	"testing"

	"github.com/loopgate/loopgate/redact"
)

// eventStrings are the kind of strings an event carries: timestamps,
// dates, ids, tool names, counts, short text, and now and then a phone
// number or an e-mail address.
var eventStrings = []string{
	"2026-11-30T06:30:02Z",
	"2026-11-30T06:30:02.123456789Z",
	"2026-11-02",
	"CMP-2026-000123",
	"SR-10421",
	"case_lookup",
	"complaints.search",
	"ok",
	"1432",
	"1763876543",
	"open",
	"Resident reports the streetlight on Elm St has been out since 2026-11-02; second report this month.",
	"Noise complaint filed 2026-10-28 at 23:40, follow-up scheduled for 2026-11-04 09:00-10:00.",
	"Please call me back at (415) 555-2671 after 5pm.",
	"Contact: helena.v@example.org",
	"Closed as duplicate of CMP-2026-000118.",
	"12345678-1234-5123-8123-123456789012",
	"Updated 3 records in 0.42s",
}

func BenchmarkString(b *testing.B) {
	r := redact.New(nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range eventStrings {
			r.String(s)
		}
	}
}

// eventDocs are event data as JSON redacts them: a proposed decision, a
// tool result, an observation's envelope; nothing in them to redact.
var eventDocs = [][]byte{
	[]byte(`{"decision":{"tool_calls":[{"call_id":"s3c1","tool":"draft_escalation","args":{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."}}]},"model":"scripted","usage":{"input_tokens":812,"output_tokens":64}}`),
	[]byte(`{"status":"ok","result":{"complaints":[{"request_id":"SR-10421","category":"sanitation","opened":"2026-11-02","days_open":9,"address":"14 Elm St","summary":"Household trash not collected for two consecutive weeks"},{"request_id":"SR-10423","category":"sanitation","opened":"2026-11-05","days_open":6,"address":"2 Birch Ave","summary":"Overflowing public bin at the bus stop"}]},"duration_ms":3,"attempt":1}`),
	[]byte(`{"args_hash":"3f2a9c","canonical_args":{"request_id":"SR-10421"},"operation_id":"0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e01","deadline":"2026-11-30T06:30:32Z"}`),
}

func BenchmarkJSON(b *testing.B) {
	r := redact.New(nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		for _, d := range eventDocs {
			r.JSON(d)
		}
	}
}

// euStrings hold European phone numbers and an IBAN, as a tool result's
// strings may: the library's detector confirms each candidate.
var euStrings = []string{
	"Ines Marlow, +49 30 12345678",
	"rappeler au 01 23 45 67 89",
	"call 020 7946 0958 after 5pm",
	"refund to DE89 3704 0044 0532 0130 00",
	"Opened 2026-11-02, ref 311-2024-000123",
}

func BenchmarkStringEuropean(b *testing.B) {
	r := redact.New(nil, nil)
	b.ReportAllocs()
	for b.Loop() {
		for _, s := range euStrings {
			r.String(s)
		}
	}
}
