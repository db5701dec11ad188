package redact_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/loopgate/loopgate/redact"
)

// The tests here are of places a sensitive value used to hide from
// redaction, each with what must still pass untouched.

// jsonCase is a document JSON redacts to want exactly, reporting a change
// exactly when want differs from it.
type jsonCase struct{ given, want string }

func checkJSON(t *testing.T, r *redact.Redactor, cases []jsonCase) {
	t.Helper()
	for _, c := range cases {
		got, changed := r.JSON([]byte(c.given))
		if string(got) != c.want {
			t.Errorf("JSON(%s) = %s, want %s", c.given, got, c.want)
		}
		if changed != (c.given != c.want) {
			t.Errorf("JSON(%s): changed = %v", c.given, changed)
		}
		if json.Valid([]byte(c.given)) && !json.Valid(got) {
			t.Errorf("JSON(%s) = %s: no longer JSON", c.given, got)
		}
	}
}

// A JSON object with a repeated name: decoded into a map, only the last
// value of the name was looked at, and the document, "unchanged", used to
// go out with the secret under an earlier one. Every occurrence is
// redacted now, and every member kept.
func TestDuplicateNamesDoNotHideSecrets(t *testing.T) {
	t.Parallel()
	checkJSON(t, redact.New(nil, nil), []jsonCase{
		{`{"token":"hunter2-live","token":null}`, `{"token":"[redacted]","token":null}`},
		{`{"password":"hunter2-live","password":"[redacted]"}`, `{"password":"[redacted]","password":"[redacted]"}`},
		{`{"note":"write to jane.doe@example.org","note":"x"}`, `{"note":"write to [email]","note":"x"}`},
		{`{"rows":[{"password":"hunter2-live","password":null}]}`, `{"rows":[{"password":"[redacted]","password":null}]}`},
		{`{"note":"x","note":"write to jane.doe@example.org"}`, `{"note":"x","note":"write to [email]"}`},
		// Nothing to redact: returned as it was.
		{`{"a":"x", "a":"y"}`, `{"a":"x", "a":"y"}`},
	})
}

// A document whose first value is JSON and that goes on with more used to
// have only that value read, and was returned whole when it was clean. It
// is not one JSON value: it is redacted as text.
func TestTrailingTextAfterAJSONValueIsRedacted(t *testing.T) {
	t.Parallel()
	checkJSON(t, redact.New(nil, nil), []jsonCase{
		{`{"ok":true} password=hunter2-live`, `{"ok":true} [bearer]`},
		{`{"ok":true}{"token":"hunter2-live"}`, `{"ok":true}{"[bearer]"}`},
		{`1 mail jane.doe@example.org`, `1 mail [email]`},
		// White space after the value is no more text.
		{"{\"ok\":true}\n", "{\"ok\":true}\n"},
		{"{\"note\":\"mail jane.doe@example.org\"}\n", `{"note":"mail [email]"}`},
		{`{"a":1} {"b":2}`, `{"a":1} {"b":2}`},
	})
}

// Names are strings too ("strings anywhere are scanned"): a result keyed
// by e-mail address used to keep every address. Two names redacted alike,
// or like a name the object has, are kept apart by a suffix.
func TestObjectNamesAreScanned(t *testing.T) {
	t.Parallel()
	checkJSON(t, redact.New(nil, nil), []jsonCase{
		{`{"jane.doe@example.org":{"open":3},"555-0121":{"open":1}}`, `{"[email]":{"open":3},"[phone]":{"open":1}}`},
		{`{"a@b.io":1,"c@d.io":2,"e@f.io":3}`, `{"[email]":1,"[email]#2":2,"[email]#3":3}`},
		{`{"a@b.io":1,"[email]":0,"[email]#2":9}`, `{"[email]#3":1,"[email]":0,"[email]#2":9}`},
		{`[{"x":{"a@b.io":true}}]`, `[{"x":{"[email]":true}}]`},
		// Names without a pattern stay.
		{`{"input_tokens":1,"2026-11-02":3,"SR-10421":{"open":true}}`, `{"input_tokens":1,"2026-11-02":3,"SR-10421":{"open":true}}`},
	})
}

// A Luhn-valid card number followed by another digit group (a CVV, an
// expiry), or after one, is one longer match of the Card expression; that
// match used to fail Luhn and be kept whole, card number and all.
func TestCardFollowedByMoreDigitsIsRedacted(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	for given, want := range map[string]string{
		"card 4242 4242 4242 4242 123": "card [card] 123",
		"card 4111-1111-1111-1111-99":  "card [card]-99",
		"card 4111111111111111 12 26":  "card [card] 12 26",
		"order 12 4111 1111 1111 1111": "order 12 [card]",
		"card 4111 1111 1111 1111":     "card [card]",
		"amex 3782 822463 10005 12":    "amex [card] 12",
		"ref 1234 5678 9012 3456":      "ref 1234 5678 9012 3456", // no group run of it passes Luhn
		"ref 1234 5678 9012 3456 7":    "ref 1234 5678 9012 3456 7",
		"batch 4111111111111111123":    "batch 4111111111111111123", // one run: not cut inside
		// A run within that passes Luhn by chance, but is not written as
		// a card number is.
		"SR 2026 11 02 0930 0001 17 42": "SR 2026 11 02 0930 0001 17 42",
	} {
		if got, _ := r.String(given); got != want {
			t.Errorf("String(%q) = %q, want %q", given, got, want)
		}
	}
}

// Values under identifier names (…_id, …_hash, …_seq) used to be skipped
// whole, in every document, tool results included. They are scanned for
// e-mail addresses and bearer tokens now, which none of loopgate's
// identifiers looks like; not for the digit-shaped patterns (a UUID or a
// sequence number is not a phone number). A value under "id" alone is
// never scanned: in the started event it is the task's principal, which a
// resumed run acts for and checks approvers against.
func TestIdentifierNamesInToolResultsAreScanned(t *testing.T) {
	t.Parallel()
	checkJSON(t, redact.New(nil, nil), []jsonCase{
		{`{"resident_id":"jane.doe@example.org","contact_id":"Bearer eyJhbGciOiJIUzI1NiJ9.abcdef"}`, `{"resident_id":"[email]","contact_id":"[bearer]"}`},
		{`{"Owner_ID":"mail jane.doe@example.org","key_hash":"sk-abcdefghijklmnop"}`, `{"Owner_ID":"mail [email]","key_hash":"[bearer]"}`},
		// Digit shapes, and loopgate's own ids, stay.
		{`{"caller_id":"555-0121","card_id":"4111 1111 1111 1111","ssn_seq":"123-45-6789"}`, `{"caller_id":"555-0121","card_id":"4111 1111 1111 1111","ssn_seq":"123-45-6789"}`},
		{`{"operation_id":"0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e01","args_hash":"sha256:5550121","call_id":"s3c1","approval_seq":2}`, `{"operation_id":"0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e01","args_hash":"sha256:5550121","call_id":"s3c1","approval_seq":2}`},
		{`{"task":{"principal":{"id":"jane.doe@cityops.org","roles":["operator"]}}}`, `{"task":{"principal":{"id":"jane.doe@cityops.org","roles":["operator"]}}}`},
		// A list under an identifier name is scanned in full, as before.
		{`{"caller_id":["555-0121"]}`, `{"caller_id":["[phone]"]}`},
	})
}

// The credential pattern took password=… and token: … in free text, but
// used to miss the same credential written as JSON inside a string, the
// commonest form in tool output (an HTTP body, a log line, a tool
// service's error) and in a malformed decision kept as text.
func TestQuotedCredentialsInTextAreRedacted(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	for given, want := range map[string]string{
		`upstream answered 401: {"password":"hunter2-live"}`: `upstream answered 401: {"[bearer]"}`,
		`{"token": "tok-live-abcdef123456"}`:                 `{"[bearer]"}`,
		`config: {'api_key': 'hunter2-live'}`:                `config: {'[bearer]'}`,
		`password=hunter2-live`:                              `[bearer]`,
		// Names that only contain a credential word stay, as do empty values.
		`{"input_tokens": 812, "token_count": 3, "tokens": 9}`: `{"input_tokens": 812, "token_count": 3, "tokens": 9}`,
		`{"password": ""}`: `{"password": ""}`,
	} {
		if got, _ := r.String(given); got != want {
			t.Errorf("String(%q) = %q, want %q", given, got, want)
		}
	}
	checkJSON(t, r, []jsonCase{
		{`{"body":"{\"password\":\"hunter2-live\"}"}`, `{"body":"{\"[bearer]\"}"}`},
	})
}

// A rewritten document escapes U+2028 and U+2029 as the events' encoder
// does (\u2028, 6 bytes): written raw (3 bytes), what the worker bounded
// here grew past its bound once stored.
func TestARewrittenDocumentEscapesLineSeparatorsAsEventsDo(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	out, changed := r.JSON([]byte("{\"note\":\"ana@example.org\u2028and\u2029more\"}"))
	if !changed || !bytes.Contains(out, []byte(`\u2028and\u2029more`)) || bytes.ContainsRune(out, '\u2028') || bytes.ContainsRune(out, '\u2029') {
		t.Fatalf("redacted %s (changed %v), want the address redacted and the separators escaped", out, changed)
	}
}
