package redact_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/redact"
)

// European numbers as people write them, international and national, are
// found by the library's detector; the US shapes stay caught.
func TestPhoneNumbersAsWrittenAreRedacted(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	for given, want := range map[string]string{
		// E.164 with spaces, and international formats.
		"call +49 30 12345678 today": "call [phone] today",
		"+33 1 23 45 67 89":          "[phone]",
		"+44 20 7946 0958.":          "[phone].",
		"+44 (0)20 7946 0958":        "[phone]",
		"+39 06 1234 5678":           "[phone]",
		"+34 912 34 56 78":           "[phone]",
		"+31 20 123 4567":            "[phone]",
		"+41 44 668 18 00":           "[phone]",
		"+353 1 234 5678":            "[phone]",
		"+4930123456789":             "[phone]",
		"0049 30 12345678":           "[phone]",
		"0044 20 7946 0958":          "[phone]",
		"Tel.: +49 (0)30 1234567-0":  "Tel.: [phone]",
		// National formats of the default regions.
		"030 12345678":                     "[phone]",
		"(030) 12345678":                   "[phone]",
		"ruf an: 030/123 456 78.":          "ruf an: [phone].",
		"0151 23456789":                    "[phone]",
		"01 23 45 67 89":                   "[phone]",
		"01.23.45.67.89":                   "[phone]",
		"01 23 45 67 89 et 06 12 34 56 78": "[phone] et [phone]",
		"020 7946 0958":                    "[phone]",
		"0161 496 0000":                    "[phone]",
		"06-12345678":                      "[phone]",
		"020-1234567":                      "[phone]",
		"91 123 45 67":                     "[phone]",
		"612 34 56 78":                     "[phone]",
		"06 1234 5678":                     "[phone]",
		"347 123 4567":                     "[phone]",
		"call 030 12345678 at 12:00":       "call [phone] at 12:00",
		"Paris 75001, 01 42 68 53 00":      "Paris 75001, [phone]",
		"tel 030\u00a012345678":            "tel [phone]", // a no-break space
		// The US shapes, as before.
		"(415) 555-2671":  "[phone]",
		"+1 415 555 2671": "[phone]",
		"415.555.2671":    "[phone]",
		"call 555-0121.":  "call [phone].",
	} {
		if got, _ := r.String(given); got != want {
			t.Errorf("String(%q) = %q, want %q", given, got, want)
		}
	}
}

// Dates, timestamps, ids, order numbers, amounts, UUIDs and versions are
// not phone numbers, though some of them are valid ones to the library.
func TestDigitsThatAreNotPhoneNumbersStay(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	for _, s := range []string{
		"311-2024-000123", "request 311-2024-000123 is open", "CMP-2026-000123", "SR-10421", "INV-2026-0042-17",
		"2026-11-02", "02.11.2026", "11/30/2026", "2026-11-30T06:30:02Z", "2026-11-30 06:30:02", "on 02.11.2026 08:00",
		"02 11 2026", "SR 2026 11 02 0930 0001 17 42", "order 2026 000123 4", "2024 000123", "2026-000123",
		"12 345 678", "amount 1 234 567,89 EUR", "1,234,567.89", "0123456789", "1763876543", "1763876543123",
		"ref 00012345678", "id 0001 2345 6789", "12345678-1234-5123-8123-123456789012", "0b9d2f57-7d1e-5c1a-9f0e-3c1f4a2b6e01",
		"v1.26.8", "Updated 3 records in 0.42s", "09:00-10:00", "sha256:5550121",
	} {
		if got, changed := r.String(s); changed {
			t.Errorf("String(%q) = %q, want it unchanged", s, got)
		}
	}
	// CityOps request ids and dates in a tool result stay; its residents'
	// phone numbers go.
	doc := `{"complaints":[{"request_id":"SR-20001","opened":"2026-11-02","ref":"311-2024-000123","days_open":14,"resident_phone":"555-0201","alt_phone":"+44 20 7946 0958"}]}`
	want := `{"complaints":[{"request_id":"SR-20001","opened":"2026-11-02","ref":"311-2024-000123","days_open":14,"resident_phone":"[phone]","alt_phone":"[phone]"}]}`
	if got, _ := r.JSON([]byte(doc)); string(got) != want {
		t.Errorf("JSON(%s) = %s, want %s", doc, got, want)
	}
}

// PhoneRegions choose the national formats looked for; international ones
// are found whatever the regions.
func TestPhoneRegionsChooseTheNationalFormats(t *testing.T) {
	t.Parallel()
	fr, err := redact.NewFromConfig(&redact.Config{PhoneRegions: []string{"FR"}})
	if err != nil {
		t.Fatal(err)
	}
	for given, want := range map[string]string{
		"01 23 45 67 89":   "[phone]",
		"030 12345678":     "030 12345678", // German, written nationally
		"+49 30 12345678":  "[phone]",
		"020 7946 0958":    "020 7946 0958",
		"+44 20 7946 0958": "[phone]",
	} {
		if got, _ := fr.String(given); got != want {
			t.Errorf("with FR only, String(%q) = %q, want %q", given, got, want)
		}
	}
	none, err := redact.NewFromConfig(&redact.Config{PhoneRegions: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := none.String("01 23 45 67 89 or +33 1 23 45 67 89"); got != "01 23 45 67 89 or [phone]" {
		t.Errorf("with no regions: %q", got)
	}
	for _, bad := range [][]string{{"XX"}, {"de"}, {"001"}} {
		if _, err := redact.NewFromConfig(&redact.Config{PhoneRegions: bad}); err == nil || !strings.Contains(err.Error(), bad[0]) {
			t.Errorf("PhoneRegions %q: err = %v, want one naming it", bad, err)
		}
	}
	if _, err := redact.NewFromConfig(&redact.Config{Patterns: []redact.Pattern{"passport"}}); err == nil || !strings.Contains(err.Error(), "passport") {
		t.Errorf("an unknown pattern: err = %v, want one naming it", err)
	}
}

// IBANs are found with or without their spaces, validated by the mod-97
// check; a shape that fails the check is not an IBAN.
func TestIBANsAreRedacted(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	for given, want := range map[string]string{
		"pay to DE89 3704 0044 0532 0130 00 by Friday": "pay to [iban] by Friday",
		"DE89370400440532013000":                       "[iban]",
		"de89 3704 0044 0532 0130 00":                  "[iban]",
		"GB29 NWBK 6016 1331 9268 19":                  "[iban]",
		"NL91ABNA0417164300":                           "[iban]",
		"FR14 2004 1010 0505 0001 3M02 606":            "[iban]",
		"NO93 8601 1117 947":                           "[iban]",
		"BE68 5390 0754 7034 2026":                     "[iban] 2026", // an IBAN, then a year
		// Shapes that fail the check or the country's length stay.
		"GB29 NWBK 6016 1331 9268 18": "GB29 NWBK 6016 1331 9268 18",
		"GB29 NWBK 6016 1331 9268":    "GB29 NWBK 6016 1331 9268",
		"XX29 NWBK 6016 1331 9268 19": "XX29 NWBK 6016 1331 9268 19",
		"AB12CDEF":                    "AB12CDEF",
	} {
		if got, _ := r.String(given); got != want {
			t.Errorf("String(%q) = %q, want %q", given, got, want)
		}
	}
	if !redact.Known(redact.IBAN) || !redact.IBANValid("GB82 WEST 1234 5698 7654 32") || redact.IBANValid("GB82 WEST 1234 5698 7654 33") {
		t.Error("IBAN is not known, or the mod-97 check is wrong")
	}
	// Under an identifier name too: none of loopgate's ids is an IBAN.
	checkJSON(t, r, []jsonCase{{`{"account_id":"NL91ABNA0417164300"}`, `{"account_id":"[iban]"}`}})
	// Only the patterns configured.
	if got, _ := redact.New(nil, []redact.Pattern{redact.Email}).String("NL91ABNA0417164300"); got != "NL91ABNA0417164300" {
		t.Errorf("an IBAN was redacted without the pattern: %q", got)
	}
}

// The cues of the new detectors never hide a match either (see
// TestCuesNeverHideAMatch): checkCues on strings around their edges.
func TestNewCuesNeverHideAMatch(t *testing.T) {
	t.Parallel()
	for _, s := range phoneCorpus {
		checkCues(t, s)
	}
}

var phoneCorpus = []string{
	"+49 30 12345678", "+33 1 23 45 67 89", "+44 (0)20 7946 0958", "030 12345678", "(030) 12345678", "030/123 456 78",
	"01 23 45 67 89", "0049 30 12345678", "a+49 30 12345678", "+49 30 12345678b", "x030 12345678", "030 12345678-a",
	"-030 12345678", "030 12345678.", "2026-11-02 030 12345678", "030 12345678 2026-11-02", "+49 30 1234 5678 9",
	"DE89 3704 0044 0532 0130 00", "xDE89 3704 0044 0532 0130 00", "DE89 3704 0044 0532 0130 00x", "DE89370400440532013000",
	"GB29 NWBK 6016 1331 9268 19 2026", "[iban]555-0121", "DE89 3704 0044 0532 0130 00555-0121", "4111 1111 1111 1111 +49 30 12345678",
	"tel 030\u00a012345678", "tel 030\u202f12345678", "+44 20 7946 0958 ext 12", "555-0121 030 12345678", "030 555-0121",
}

func FuzzNewCuesNeverHideAMatch(f *testing.F) {
	for _, s := range phoneCorpus {
		f.Add(s)
	}
	f.Fuzz(checkCues)
}

// The redacted string of a document holding the new shapes is valid JSON,
// and redacting again changes nothing.
func TestRedactingTwiceChangesNothing(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	for _, s := range append(phoneCorpus, cueCorpus...) {
		once, _ := r.String(s)
		if twice, changed := r.String(once); changed {
			t.Errorf("String(%q) = %q, and again %q", s, once, twice)
		}
		doc, _ := json.Marshal(map[string]string{"note": s})
		out, _ := r.JSON(doc)
		if !json.Valid(out) {
			t.Errorf("JSON(%s) = %s: not JSON", doc, out)
		}
	}
}
