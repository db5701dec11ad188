package redact

// ExpressionOnly redacts s for p with its detectors alone, no cues: the
// reference the cues are tested against.
func ExpressionOnly(p Pattern, s string) string {
	r := New(nil, nil)
	for _, d := range detectors[p] {
		s, _ = d.replace(r, s)
	}
	return s
}

// HasPhoneWindow is the cue of the library's phone detector.
func HasPhoneWindow(s string) bool { return hasPhoneWindow(&defaultPhones, s) }

// IBANValid reports whether s, spaces aside, is an IBAN.
func IBANValid(s string) bool { return ibanValid(s) }

// CueAllows reports whether the cues of s let p's expression run on it.
func CueAllows(p Pattern, s string) bool {
	var c cues
	c.scan(s, &defaultPhones)
	return c.allow(p, s)
}

// Quiet is the fast path of JSON: true when it returns raw unchanged
// without decoding it.
func (r *Redactor) Quiet(raw []byte) bool { return r.quiet(raw) }

// Rewrite is JSON without the fast path: the reference Quiet is held to.
func (r *Redactor) Rewrite(raw []byte) ([]byte, bool) { return r.rewrite(raw) }

// PlainlyQuiet is JSON's first fast path: true when the bytes alone show
// it returns raw unchanged.
func (r *Redactor) PlainlyQuiet(raw []byte) bool { return r.plainlyQuiet(raw) }
