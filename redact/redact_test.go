package redact_test

import (
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
		{"ids and hashes are not scanned", `{"operation_id":"12345678-1234-5123-8123-123456789012","args_hash":"sha256:5550121"}`, `{"operation_id":"12345678-1234-5123-8123-123456789012","args_hash":"sha256:5550121"}`, nil},
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
	for _, p := range redact.AllPatterns {
		r := redact.New([]string{}, []redact.Pattern{p})
		got, _ := r.String(s)
		if want := redact.ExpressionOnly(p, s); got != want {
			t.Fatalf("pattern %s on %q: %q, the expression alone gives %q", p, s, got, want)
		}
	}
}
