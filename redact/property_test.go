package redact_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/nyaruka/phonenumbers"

	"github.com/loopgate/loopgate/redact"
)

// The property the phone and IBAN detectors are held to: a valid number
// of many regions, written in each usual format (E.164, international
// with spaces, 00 for +, national for the redactor's regions), and a
// valid IBAN of many countries, with or without its spaces, set in any
// text, leave no group of four of their digits in clear, in a string or
// in a JSON document (which stays valid); and what is redacted does not
// change when redacted again.

// intlRegions are regions whose numbers are written internationally in
// the generated text.
var intlRegions = []string{
	"US", "CA", "GB", "IE", "FR", "BE", "NL", "LU", "DE", "AT", "CH", "ES", "PT", "IT", "PL", "CZ", "SE",
	"NO", "DK", "FI", "GR", "RO", "HU", "JP", "AU", "BR", "IN", "ZA", "MX",
}

// ibanSamples are valid IBANs of some countries, without spaces.
var ibanSamples = []string{
	"DE89370400440532013000", "GB29NWBK60161331926819", "NL91ABNA0417164300", "FR1420041010050500013M02606",
	"BE68539007547034", "ES9121000418450200051332", "IT60X0542811101000000123456", "AT611904300234573201",
	"CH9300762011623852957", "IE29AIBK93115212345678", "PL61109010140000071219812874", "NO9386011117947",
}

// piiSample is one generated value: how it is written, and the digits
// that must not survive.
type piiSample struct {
	text   string
	digits string
}

// generate returns the n-th sample for rng.
func generate(rng *rand.Rand) piiSample {
	if rng.IntN(4) == 0 {
		iban := withCheckDigits(ibanSamples[rng.IntN(len(ibanSamples))], rng)
		text := iban
		if rng.IntN(2) == 0 {
			var b strings.Builder
			for i := 0; i < len(iban); i += 4 {
				if i > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(iban[i:min(i+4, len(iban))])
			}
			text = b.String()
		}
		if rng.IntN(3) == 0 {
			text = strings.ToLower(text)
		}
		return piiSample{text, iban[4:]}
	}
	national := rng.IntN(2) == 0
	regions := intlRegions
	if national {
		regions = redact.DefaultPhoneRegions
	}
	region := regions[rng.IntN(len(regions))]
	n := validNumber(region, rng)
	nsn := phonenumbers.GetNationalSignificantNumber(n)
	var text string
	switch {
	case national:
		text = phonenumbers.Format(n, phonenumbers.NATIONAL)
	case rng.IntN(3) == 0:
		text = phonenumbers.Format(n, phonenumbers.E164)
	case rng.IntN(2) == 0:
		text = "00" + strings.TrimPrefix(phonenumbers.Format(n, phonenumbers.INTERNATIONAL), "+")
	default:
		text = phonenumbers.Format(n, phonenumbers.INTERNATIONAL)
	}
	return piiSample{text, nsn}
}

// validNumber returns a valid fixed-line or mobile number of region: its
// example number with its last digits drawn at random while the result is
// valid.
func validNumber(region string, rng *rand.Rand) *phonenumbers.PhoneNumber {
	typ := phonenumbers.FIXED_LINE
	if rng.IntN(2) == 0 {
		typ = phonenumbers.MOBILE
	}
	ex := phonenumbers.GetExampleNumberForType(region, typ)
	for range 20 {
		nsn := []byte(phonenumbers.GetNationalSignificantNumber(ex))
		for i := max(len(nsn)-4, 1); i < len(nsn); i++ {
			nsn[i] = byte('0' + rng.IntN(10))
		}
		n, err := phonenumbers.Parse("+"+fmt.Sprint(ex.GetCountryCode())+string(nsn), "ZZ")
		if err == nil && phonenumbers.IsValidNumber(n) && phonenumbers.GetNumberType(n) == typ {
			return n
		}
	}
	return ex
}

// withCheckDigits returns iban with its account's last digits drawn at
// random and its check digits computed anew.
func withCheckDigits(iban string, rng *rand.Rand) string {
	b := []byte(iban)
	for i := len(b) - 1; i >= len(b)-4; i-- {
		if b[i] >= '0' && b[i] <= '9' {
			b[i] = byte('0' + rng.IntN(10))
		}
	}
	b[2], b[3] = '0', '0'
	rem := 0
	for k := range b {
		c := b[(k+4)%len(b)]
		if c >= '0' && c <= '9' {
			rem = (rem*10 + int(c-'0')) % 97
		} else {
			rem = (rem*100 + int(c-'A') + 10) % 97
		}
	}
	check := 98 - rem
	b[2], b[3] = byte('0'+check/10), byte('0'+check%10)
	return string(b)
}

// befores and afters are what generated values are set between: text
// that ends (begins) with a space or punctuation.
var (
	befores = []string{"", " ", "call ", "Tel: ", "(", ", ", "\n", "IBAN ", "or ", "; ", "\"", "ref SR-10421 ", "on 2026-11-02 at 09:00, ", "4111 1111 1111 1111 / "}
	afters  = []string{"", " ", ")", ", ", ".", " today", "\n", " or ", "; ", "\"", " ref SR-10421", " on 2026-11-02 at 09:00", ": 555-0121"}
)

func checkGeneratedPII(t *testing.T, r *redact.Redactor, before, after string, v piiSample) {
	t.Helper()
	text := before + v.text + after
	out, _ := r.String(text)
	if leaked := clearGroup(out, v.digits, before+after); leaked != "" {
		t.Fatalf("String(%q) = %q: %q of %q is in clear", text, out, leaked, v.digits)
	}
	if again, changed := r.String(out); changed {
		t.Fatalf("String(%q) = %q, and again %q", text, out, again)
	}
	doc, _ := json.Marshal(map[string]string{"note": text})
	red, _ := r.JSON(doc)
	var back map[string]string
	if err := json.Unmarshal(red, &back); err != nil {
		t.Fatalf("JSON(%s) = %s: %v", doc, red, err)
	}
	if leaked := clearGroup(back["note"], v.digits, before+after); leaked != "" {
		t.Fatalf("JSON(%s) = %s: %q of %q is in clear", doc, red, leaked, v.digits)
	}
}

// clearGroup returns a group of four consecutive digits of digits that
// out's digits hold and the surroundings' digits do not, or "". Both
// sides are read as digits only: a number written in clear with spaces
// is found, and digits of the text before and after it that meet once
// the number is replaced by a marker are not taken for a leak.
func clearGroup(out, digits, surroundings string) string {
	only, around := digitsOf(out), digitsOf(surroundings)
	for i := 0; i+4 <= len(digits); i++ {
		g := digits[i : i+4]
		if strings.Contains(only, g) && !strings.Contains(around, g) {
			return g
		}
	}
	return ""
}

func digitsOf(s string) string {
	var b strings.Builder
	for _, c := range s {
		if c >= '0' && c <= '9' {
			b.WriteRune(c)
		}
	}
	return b.String()
}

func TestGeneratedPhoneNumbersAndIBANsAreRedacted(t *testing.T) {
	t.Parallel()
	r := redact.New(nil, nil)
	rng := rand.New(rand.NewPCG(1, 2))
	for range 600 {
		v := generate(rng)
		checkGeneratedPII(t, r, befores[rng.IntN(len(befores))], afters[rng.IntN(len(afters))], v)
	}
}

func FuzzGeneratedPhoneNumbersAndIBANsAreRedacted(f *testing.F) {
	f.Add(uint64(1), uint8(2), uint8(3))
	f.Add(uint64(42), uint8(0), uint8(15))
	r := redact.New(nil, nil)
	f.Fuzz(func(t *testing.T, seed uint64, before, after uint8) {
		rng := rand.New(rand.NewPCG(seed, seed>>7))
		v := generate(rng)
		checkGeneratedPII(t, r, befores[int(before)%len(befores)], afters[int(after)%len(afters)], v)
	})
}
