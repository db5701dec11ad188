package tools

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

func TestCanonical(t *testing.T) {
	t.Parallel()

	tests := []struct {
		name    string
		given   string
		want    string
		wantErr error
	}{
		{
			name: "RFC 8785 section 3.2.2 example",
			given: `{
				"numbers": [333333333.33333329, 1E30, 4.50, 2e-3, 0.000000000000000000000000001],
				"string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
				"literals": [null, true, false]
			}`,
			want: `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`,
		},
		{
			name: "RFC 8785 section 3.2.3 sorting by UTF-16 code units",
			given: `{
				"\u20ac": "Euro Sign",
				"\r": "Carriage Return",
				"\ufb33": "Hebrew Letter Dalet With Dagesh",
				"1": "One",
				"\ud83d\ude00": "Emoji: Grinning Face",
				"\u0080": "Control",
				"\u00f6": "Latin Small Letter O With Diaeresis"
			}`,
			// U+1F600 sorts before U+FB33 because its first UTF-16 code
			// unit (0xD83D) is smaller; code point order would swap them.
			want: "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u0080\":\"Control\",\"ö\":\"Latin Small Letter O With Diaeresis\",\"€\":\"Euro Sign\",\"😀\":\"Emoji: Grinning Face\",\"\ufb33\":\"Hebrew Letter Dalet With Dagesh\"}",
		},
		{name: "nested objects are sorted too", given: `{"b":{"z":1,"a":2},"a":[{"y":1,"x":2}]}`, want: `{"a":[{"x":2,"y":1}],"b":{"a":2,"z":1}}`},
		{name: "array order is kept", given: `[3, 1, 2]`, want: `[3,1,2]`},
		{name: "whitespace around the value is dropped", given: " \t\n{ \"a\" : 1 }\r\n", want: `{"a":1}`},
		{name: "empty containers", given: `{"a":{},"b":[]}`, want: `{"a":{},"b":[]}`},
		{name: "scalar at the top", given: `"x"`, want: `"x"`},
		{name: "1e21 switches to exponent form", given: `1e21`, want: `1e+21`},
		{name: "just below 1e21 stays integral", given: `999999999999999900000`, want: `999999999999999900000`},
		{name: "0.000001 stays decimal", given: `0.000001`, want: `0.000001`},
		{name: "below 0.000001 switches to exponent form", given: `0.0000001`, want: `1e-7`},
		{name: "negative zero is zero", given: `-0`, want: `0`},
		{name: "negative zero with fraction is zero", given: `-0.0e5`, want: `0`},
		{name: "shortest round trip", given: `333333333.33333329`, want: `333333333.3333333`},
		{name: "trailing zeros go", given: `[4.50, 1.0, 100e-2]`, want: `[4.5,1,1]`},
		{name: "integers beyond 2^53 are rounded like ES6", given: `12345678901234567890`, want: `12345678901234567000`},
		{name: "escapes: only the required ones", given: `"\/\u0041\u00e9\u2028\t\u001f\u007f"`, want: "\"/Aé\u2028\\t\\u001f\u007f\""},
		{name: "escaped key equal to another is a duplicate", given: `{"a":1,"\u0061":2}`, wantErr: ErrInvalidJSON},
		{name: "duplicate key", given: `{"a":1,"a":1}`, wantErr: ErrInvalidJSON},
		{name: "duplicate key nested", given: `[{"k":1,"k":2}]`, wantErr: ErrInvalidJSON},
		{name: "empty input", given: ``, wantErr: ErrInvalidJSON},
		{name: "only whitespace", given: "  \n", wantErr: ErrInvalidJSON},
		{name: "trailing garbage", given: `{} x`, wantErr: ErrInvalidJSON},
		{name: "two values", given: `1 2`, wantErr: ErrInvalidJSON},
		{name: "trailing comma", given: `[1,]`, wantErr: ErrInvalidJSON},
		{name: "leading zero", given: `01`, wantErr: ErrInvalidJSON},
		{name: "NaN", given: `NaN`, wantErr: ErrInvalidJSON},
		{name: "number beyond float64", given: `1e400`, wantErr: ErrInvalidJSON},
		{name: "lone high surrogate", given: `"\ud800"`, wantErr: ErrInvalidJSON},
		{name: "lone low surrogate", given: `"\udc00"`, wantErr: ErrInvalidJSON},
		{name: "invalid UTF-8", given: "\"\xff\"", wantErr: ErrInvalidJSON},
		{name: "raw control character in string", given: "\"a\tb\"", wantErr: ErrInvalidJSON},
		{name: "byte order mark", given: "\ufeff{}", wantErr: ErrInvalidJSON},
		{name: "single quotes", given: `{'a':1}`, wantErr: ErrInvalidJSON},
		{name: "depth 32 is allowed", given: strings.Repeat("[", 32) + strings.Repeat("]", 32), want: strings.Repeat("[", 32) + strings.Repeat("]", 32)},
		{name: "depth 33 is too deep", given: strings.Repeat("[", 33) + strings.Repeat("]", 33), wantErr: ErrTooDeep},
		{name: "mixed depth 33 is too deep", given: strings.Repeat(`{"a":[`, 16) + `{}` + strings.Repeat(`]}`, 16), wantErr: ErrTooDeep},
		{name: "brackets inside strings do not count", given: `["` + strings.Repeat("[{", 40) + `\"]"]`, want: `["` + strings.Repeat("[{", 40) + `\"]"]`},
		{name: "deep and unterminated is too deep", given: strings.Repeat("[", 10001), wantErr: ErrTooDeep},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := Canonical([]byte(tt.given))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("Canonical(%q) error = %v, want %v", tt.given, err, tt.wantErr)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical(%q)\n got %s\nwant %s", tt.given, got, tt.want)
			}
		})
	}
}

// TestCanonicalNumbersMatchRFC8785 runs the IEEE 754 samples of RFC 8785
// appendix B: each double, written in Go's shortest form, must come out in
// ECMAScript form.
func TestCanonicalNumbersMatchRFC8785(t *testing.T) {
	t.Parallel()

	tests := []struct {
		given uint64
		want  string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range tests {
		given := strconv.FormatFloat(math.Float64frombits(tt.given), 'g', -1, 64)
		t.Run(given, func(t *testing.T) {
			t.Parallel()
			got, err := Canonical([]byte(given))
			if err != nil {
				t.Fatalf("Canonical(%s): %v", given, err)
			}
			if string(got) != tt.want {
				t.Errorf("Canonical(%s) = %s, want %s", given, got, tt.want)
			}
		})
	}
}

func TestCanonicalHashNamesTheValueNotTheSpelling(t *testing.T) {
	t.Parallel()

	a, hashA, err := CanonicalHash([]byte(`{"limit": 5, "category": "sanitation"}`))
	if err != nil {
		t.Fatal(err)
	}
	b, hashB, err := CanonicalHash([]byte("{\"category\":\"\\u0073anitation\",\n\"limit\":5.0}"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) || hashA != hashB {
		t.Errorf("same arguments, different names: %s %s / %s %s", a, hashA, b, hashB)
	}
	// sha256sum of {"category":"sanitation","limit":5}: pins the format.
	const want = "sha256:656f4ad5c3d5a704d149b82f4fe3f5cd1e49c263f5d73cbb8930eb1a90280f6e"
	if hashA != want {
		t.Errorf("hash = %s, want %s", hashA, want)
	}
	_, hashC, err := CanonicalHash([]byte(`{"limit":6,"category":"sanitation"}`))
	if err != nil {
		t.Fatal(err)
	}
	if hashC == hashA {
		t.Errorf("different arguments share hash %s", hashC)
	}
}

func TestHashOfEmptyInputIsSHA256OfNothing(t *testing.T) {
	t.Parallel()

	const want = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
	if got := Hash(nil); got != want {
		t.Errorf("Hash(nil) = %s, want %s", got, want)
	}
}

func TestCanonicalHashReturnsNothingOnError(t *testing.T) {
	t.Parallel()

	c, h, err := CanonicalHash([]byte(`{"a":1,"a":2}`))
	if !errors.Is(err, ErrInvalidJSON) || c != nil || h != "" {
		t.Errorf("CanonicalHash(duplicate) = %q, %q, %v; want nil, \"\", ErrInvalidJSON", c, h, err)
	}
}

func FuzzCanonical(f *testing.F) {
	for _, s := range []string{
		`{"b":1,"a":[true,false,null,"x"]}`,
		`[1e21, 0.000001, -0, 333333333.33333329, 1E30, 4.50, 2e-3]`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`"\u0000\u001f\/\\\"\u2028"`,
		`{"a":{"b":{"c":[[[{}]]]}}}`,
		`{"a":1,"a":2}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		once, err := Canonical(raw)
		if err != nil {
			if !errors.Is(err, ErrInvalidJSON) && !errors.Is(err, ErrTooDeep) {
				t.Fatalf("error %v wraps neither sentinel", err)
			}
			return
		}
		if !json.Valid(once) {
			t.Fatalf("Canonical(%q) = %q is not valid JSON", raw, once)
		}
		twice, err := Canonical(once)
		if err != nil {
			t.Fatalf("Canonical of canonical %q: %v", once, err)
		}
		if !bytes.Equal(once, twice) {
			t.Fatalf("not idempotent:\n once %q\ntwice %q", once, twice)
		}
		if depth(once) > MaxDepth {
			t.Fatalf("output %q nests deeper than %d", once, MaxDepth)
		}
	})
}
