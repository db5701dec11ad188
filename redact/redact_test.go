package redact_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/redact"
)

func TestJSONRedactsKeysAndPatternsAndKeepsTheShape(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	cases := []struct {
		name, given string
		want        string
		gone        []string
	}{
		{"nothing sensitive", `{"request_id":"SR-10421","days_open":9}`, `{"request_id":"SR-10421","days_open":9}`, nil},
		{"sensitive keys, any case, any depth", `{"API_KEY":"k-123","nested":[{"Password":"hunter2"}],"token":null}`, `{"API_KEY":"[redacted]","nested":[{"Password":"[redacted]"}],"token":null}`, []string{"k-123", "hunter2"}},
		{"email", `{"note":"write to helena.v@example.org today"}`, `{"note":"write to [email] today"}`, []string{"helena"}},
		{"phone", `{"resident_phone":"555-0121","alt":"(415) 555-2671"}`, `{"resident_phone":"[phone]","alt":"[phone]"}`, []string{"0121", "2671"}},
		{"card", `{"memo":"card 4111 1111 1111 1111 on file"}`, `{"memo":"card [card] on file"}`, []string{"4111"}},
		{"ssn", `{"memo":"ssn 123-45-6789"}`, `{"memo":"ssn [ssn]"}`, []string{"6789"}},
		{"bearer", `{"hdr":"Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.abc"}`, `{"hdr":"Authorization: [bearer]"}`, []string{"eyJ"}},
		{"ids and hashes are not scanned for digit shapes", `{"operation_id":"12345678-1234-5123-8123-123456789012","args_hash":"sha256:5550121"}`, `{"operation_id":"12345678-1234-5123-8123-123456789012","args_hash":"sha256:5550121"}`, nil},
		{"a digit run that fails Luhn is not a card", `{"memo":"ref 1234 5678 9012 3456"}`, `{"memo":"ref 1234 5678 9012 3456"}`, nil},
		{"numbers stay numbers", `{"n":12345678901234567890,"days":9}`, `{"n":12345678901234567890,"days":9}`, nil},
		{"not JSON", `call 555-0121`, `call [phone]`, []string{"0121"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, changed := r.JSON([]byte(c.given))
			if string(got) != c.want && !jsonEqual(got, []byte(c.want)) {
				t.Fatalf("JSON(%s) = %s, want %s", c.given, got, c.want)
			}
			if changed != (c.given != c.want) {
				t.Errorf("changed = %v", changed)
			}
			for _, g := range c.gone {
				if strings.Contains(string(got), g) {
					t.Errorf("%q survived: %s", g, got)
				}
			}
		})
	}
}

func TestConfiguredKeysAndPatternsOnly(t *testing.T) {
	t.Parallel()
	r := redact.New([]string{"badge"}, []redact.Pattern{redact.Email})
	got, _ := r.JSON([]byte(`{"badge":"B-7","password":"p","mail":"a@b.io","phone":"555-0121"}`))
	if !jsonEqual(got, []byte(`{"badge":"[redacted]","password":"p","mail":"[email]","phone":"555-0121"}`)) {
		t.Fatalf("got %s", got)
	}
	if got, changed := redact.New([]string{}, []redact.Pattern{}).JSON([]byte(`{"password":"p"}`)); changed || string(got) != `{"password":"p"}` {
		t.Fatalf("an empty configuration redacted: %s", got)
	}
}

func FuzzJSONStaysValid(f *testing.F) {
	f.Add([]byte(`{"a":"x@y.io","password":"p","list":[1,"555-0121"]}`))
	f.Add([]byte(`"plain"`))
	r := redact.New(nil, nil)
	f.Fuzz(func(t *testing.T, raw []byte) {
		out, _ := r.JSON(raw)
		if json.Valid(raw) && !json.Valid(out) {
			t.Fatalf("valid %q became invalid %q", raw, out)
		}
	})
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	xa, _ := json.Marshal(x)
	ya, _ := json.Marshal(y)
	return string(xa) == string(ya)
}

// cueCorpus holds strings around each cue's edge: matches and near misses.
var cueCorpus = []string{
	"", "plain words", "x@y.io", "mail A.B@EXAMPLE.ORG now", "@", "4111 1111 1111 1111", "4111-1111-1111-1111",
	"411111111111", "123-45-6789", "12345678", "555-0121", "(555) 012-3456", "+44 20 7946 0958", "5550121",
	"Bearer abcdefgh12345", "BEARER   zzzzzzzzzz==", "sk-abcdefghijklmn", "SK_ABCDEFGHIJKLMN", "ghp_abcdefghijklmnop",
	"xoxb-1234567890ab", "password=hunter2", "PassWord : x", "pwd=1", "token: abc", "Secret=abc", "api-key=abc",
	"API_KEY=abc", "apikey: z", "ſk-abcdefghijklmn", "\u212a", "sK-abcdefghijklmn", "my bearer is late",
	// Phone: the least that matches each alternative, then near misses.
	"555-0121", "call 555-0121.", "tel:555-0121", "555-012-3456", "555.012.3456", "555 012 3456",
	"(555)012-3456", "(555) 012-3456", "(555)-012-3456", "(555).012.3456", "+1 555-012-3456", "+1555.012.3456",
	"+1-555 012 3456", "é555-0121é", "\xff555-0121\xff", "555 0121", "555.0121", "x555-0121", "555-0121x",
	"_555-0121", "555-0121_", "5555-0121", "555-01210", "55-0121", "555-012", "555--0121", "555_0121",
	"555,0121", "555/0121", "(555)012 3456", "(55) 012-3456", "555-012-345", "555 012 34567",
	// SSN.
	"123-45-6789", "ssn:123-45-6789;", "é123-45-6789\xff", "a123-45-6789", "123-45-6789a", "_123-45-6789",
	"1234-45-6789", "123-456-6789", "123-45-67890", "123 45 6789", "123-4-56789", "123-45--6789", "x-123-45-6789-x",
	// Card: 13 digits, the least the expression takes, in every spacing.
	"4222222222222", "4222 2222 2222 2", "4-2-2-2-2-2-2-2-2-2-2-2-2", "4 2 2 2 2 2 2 2 2 2 2 2 2", "422222222222",
	"x4222222222222", "4222222222222x", "_4222222222222", "4222222222222_", "é4222222222222é", "\xff4222222222222",
	"4111111111111111", "x4111 1111 1111 1111", "4111 1111 1111 1111x", "x4111 1111 1111 1111 1", "4111  1111 1111 1111",
	"4111 -1111 1111 1111", "4111 1111 1111 1111 1111 1111", "41111111111111111111", "4111.1111.1111.1111",
	"a-4111-1111-1111-1111-b", "4111 1111 1111 1111 555-0121 123-45-6789", "12345678-1234-5123-8123-123456789012",
	// Everyday strings with digits and dashes.
	"2026-11-30T06:30:02Z", "2026-11-30T06:30:02.123456789Z", "2026-11-02", "CMP-2026-000123", "SR-10421", "1763876543",
	"1763876543123", "2026-11-30 06:30:02", "09:00-10:00", "1,234,567.89",
	// A marker can make a word boundary a later expression needs.
	"a@b.io555-0121", "a@b.io123-45-6789", "a@b.io4111111111111111", "x@y.IO555 012 3456", "token=x 555-0121",
	"Bearer abcdefgh==555-0121", "4111111111111111-555-0121",
	// A card number among more digit groups; credentials quoted.
	"4242 4242 4242 4242 123", "12 4111 1111 1111 1111", "4111111111111111 12 26", "3782 822463 10005 12",
	`{"password":"x"}`, `'api_key': 'x'`, `token" = "x`, `"token":""`,
}

// everyday are strings an event carries that are not sensitive but have
// digits and dashes enough for the old digit-count cues.
var everyday = []string{
	"2026-11-30T06:30:02Z", "2026-11-30T06:30:02.123456789Z", "2026-11-02", "2026-11-30 06:30:02", "CMP-2026-000123",
	"SR-10421", "1763876543", "12345678", "v1.26.8", "09:00-10:00", "1,234,567.89", "INV-2026-0042-17",
	// Ids whose digits touch letters or '_': no \b there.
	"SR123-4567", "rel-123-4567b", "build_123-4567", "A123-45-6789", "CASE-123-45-6789X", "case_123-45-6789",
	"0x4111111111111111ff", "deadbeef1234567890123cafe", "trace_4111111111111111", "4111111111111111ms",
	"Noise complaint filed 2026-10-28 at 23:40, follow-up scheduled for 2026-11-04 09:00-10:00.",
	"Resident reports the streetlight on Elm St has been out since 2026-11-02; second report this month.",
	// Near misses at the cues' edges.
	"123.45-6789", "123-45.6789", "123-45 6789", "555-012", "4111 1111 1111", "4111  1111 1111 1111",
}

// TestCuesSkipEverydayDigits: the digit cues are sharp enough that dates,
// timestamps, ids and counts do not run the card, SSN and phone
// expressions (and, checkCues says, rightly so).
func TestCuesSkipEverydayDigits(t *testing.T) {
	t.Parallel()
	for _, s := range everyday {
		checkCues(t, s)
		for _, p := range []redact.Pattern{redact.Card, redact.SSN, redact.Phone} {
			if redact.CueAllows(p, s) {
				t.Errorf("the %s cue lets %q through", p, s)
			}
		}
	}
}

// TestCuesNeverHideAMatch: every pattern redacts exactly what its
// expression alone does; the cues only skip strings it cannot match.
func TestCuesNeverHideAMatch(t *testing.T) {
	for _, s := range cueCorpus {
		checkCues(t, s)
	}
}

func FuzzCuesNeverHideAMatch(f *testing.F) {
	for _, s := range cueCorpus {
		f.Add(s)
	}
	f.Fuzz(checkCues)
}

func checkCues(t *testing.T, s string) {
	want := s
	for _, p := range redact.AllPatterns {
		r := redact.New([]string{}, []redact.Pattern{p})
		got, _ := r.String(s)
		if want := redact.ExpressionOnly(p, s); got != want {
			t.Fatalf("pattern %s on %q: %q, the expression alone gives %q", p, s, got, want)
		}
		want = redact.ExpressionOnly(p, want)
	}
	// All patterns at once: each expression runs on what the ones before
	// it left, and a marker can change what a later cue sees.
	if got, _ := redact.New([]string{}, nil).String(s); got != want {
		t.Fatalf("all patterns on %q: %q, the expressions alone give %q", s, got, want)
	}
}

// quietCorpus: documents JSON returns unchanged (want true) and ones it
// must rewrite or read the long way (want false).
var quietCorpus = []struct {
	doc   string
	quiet bool
}{
	{`{"run_id":"0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e01","step":3,"time":"2026-11-30T06:30:02Z","ok":true,"n":null}`, true},
	{`{"complaints":[{"request_id":"SR-10421","opened":"2026-11-02","days_open":9,"summary":"Household trash not collected for two consecutive weeks"}]}`, true},
	{`{"args":{"request_id":"SR-10421","reason":"Open 9 days, past the 5-day threshold."},"args_hash":"3f2a"}`, true},
	{`[1,2.5e3,"text",[],{}]`, true},
	{`"plain"`, true},
	{`{"password":null,"token":"[redacted]"}`, true},
	{`{"caller_id":"555-0121"}`, true},    // an id: never scanned
	{`{"caller_id":["555-0121"]}`, false}, // ... but a list under it is
	{`{"note":"call 555-0121"}`, false},   // a pattern
	{`{"a":{"b":["x@y.io"]}}`, false},     // deep
	{`{"password":"hunter2"}`, false},     // a sensitive key
	{`{"Password":{"x":1}}`, false},       // any value but null or Marker
	{`{"token":[]}`, false},               //
	{`{"a":"x"} {"b":"y"}`, false},        // two values: the long way decides
	{`{"a":"x","a":"y"}`, false},          // duplicate names
	{"{\"a\":\"\xff\"}", false},           // invalid UTF-8
	{`{"a":`, false},                      // not JSON
	{`   `, false},                        //
	{`{"m":"x\u0040y.io"}`, false},        // escapes are read as decoded
	{`{"s":"contact: ssn 123-45-6789, card 4111 1111 1111 1111"}`, false},
	{`{"x@y.io":1}`, false},                       // a name is scanned
	{`{"resident_id":"x@y.io"}`, false},           // an id, for addresses
	{`{"id":"x@y.io","run_id":"555-0121"}`, true}, // but not "id", nor ids for digits
	{`{"a":"b","a":{"token":"x"}}`, false},        // a repeated name
	{`{"note":"\"password\":\"x\""}`, false},      // a quoted credential
}

// Quiet says "unchanged" exactly for what the long way leaves alone, and
// for the everyday documents of a run (or it would save nothing).
func TestQuietIsTheLongWayWithoutTheWork(t *testing.T) {
	r := redact.New(nil, nil)
	for _, c := range quietCorpus {
		if got := r.Quiet([]byte(c.doc)); got != c.quiet {
			t.Errorf("Quiet(%s) = %v, want %v", c.doc, got, c.quiet)
		}
		checkQuiet(t, r, []byte(c.doc))
	}
}

func FuzzQuietIsExact(f *testing.F) {
	for _, c := range quietCorpus {
		f.Add([]byte(c.doc))
	}
	r := redact.New(nil, nil)
	f.Fuzz(func(t *testing.T, raw []byte) { checkQuiet(t, r, raw) })
}

func checkQuiet(t *testing.T, r *redact.Redactor, raw []byte) {
	t.Helper()
	if !r.Quiet(raw) {
		return
	}
	if out, changed := r.Rewrite(raw); changed || !bytes.Equal(out, raw) {
		t.Fatalf("Quiet(%q) but the long way gives %q (changed %v)", raw, out, changed)
	}
}

// PlainlyQuiet, read off the bytes alone, takes the everyday documents
// of a run (or it would save nothing), and says "unchanged" only for
// what the long way leaves alone.
func TestPlainlyQuietTakesEverydayDocumentsOnly(t *testing.T) {
	r := redact.New(nil, nil)
	// The first five are a run's everyday documents. Two values, duplicate
	// names, a broken or blank document hold nothing to redact either (the
	// long way leaves them alone); an id, a null under a key, an escape do
	// not show that in their bytes.
	plain := map[int]bool{0: true, 1: true, 2: true, 3: true, 4: true, 13: true, 14: true, 16: true, 17: true}
	for i, c := range quietCorpus {
		if got := r.PlainlyQuiet([]byte(c.doc)); got != plain[i] {
			t.Errorf("PlainlyQuiet(%s) = %v, want %v", c.doc, got, plain[i])
		}
		checkPlainlyQuiet(t, r, []byte(c.doc))
	}
	// A principal is not an e-mail address, nor a usage count a token;
	// an address and a credential in text are seen.
	for doc, want := range map[string]bool{
		`{"approver":"supervisor@cityops","usage":{"input_tokens":420,"output_tokens":60}}`: true,
		`{"note":"write to dev@cityops.org"}`:                                               false,
		`{"note":"token: abcdef"}`:                                                          false,
		`{"Token":1}`:                                                                       false,
	} {
		if got := r.PlainlyQuiet([]byte(doc)); got != want {
			t.Errorf("PlainlyQuiet(%s) = %v, want %v", doc, got, want)
		}
		checkPlainlyQuiet(t, r, []byte(doc))
	}
	// A key the configuration names is found in any case.
	if redact.New([]string{"Badge"}, nil).PlainlyQuiet([]byte(`{"BADGE":"x"}`)) {
		t.Error("PlainlyQuiet passed a sensitive key in capitals")
	}
}

func FuzzPlainlyQuietIsExact(f *testing.F) {
	for _, c := range quietCorpus {
		f.Add([]byte(c.doc))
	}
	f.Add([]byte(`{"n":"4111 1111 1111 1111"}`))
	f.Add([]byte(`["123-45-6789"]`))
	f.Add([]byte(`{"a":"Bearer abcdefghijklmnop"}`))
	f.Add([]byte(`{"approver":"supervisor@cityops","usage":{"input_tokens":420}}`))
	f.Add([]byte(`{"a":"mail dev@city-ops.org.uk","b":"token: abcdef","c":"x_token=1"}`))
	r := redact.New(nil, nil)
	f.Fuzz(func(t *testing.T, raw []byte) { checkPlainlyQuiet(t, r, raw) })
}

func checkPlainlyQuiet(t *testing.T, r *redact.Redactor, raw []byte) {
	t.Helper()
	if !r.PlainlyQuiet(raw) {
		return
	}
	if out, changed := r.Rewrite(raw); changed || !bytes.Equal(out, raw) {
		t.Fatalf("PlainlyQuiet(%q) but the long way gives %q (changed %v)", raw, out, changed)
	}
}
