// Package redact keeps sensitive values out of the audit stream and, per
// profile, out of what the model reads. Values under sensitive keys
// (api_key, token, password, ssn, …) are replaced whole; strings anywhere
// are scanned for patterns — e-mail addresses, phone numbers, card-like and
// SSN-like numbers, bearer tokens — and each match is replaced by a marker
// naming what was there ("[email]"). Structure is kept: redacted JSON is
// still valid JSON of the same shape.
package redact

import (
	"bytes"
	"encoding/json"
	"regexp"
	"slices"
	"strings"
)

// Marker replaces a value under a sensitive key.
const Marker = "[redacted]"

// DefaultKeys are the sensitive keys when the config names none.
var DefaultKeys = []string{
	"api_key", "apikey", "access_token", "refresh_token", "token", "secret", "client_secret",
	"password", "passwd", "passphrase", "authorization", "cookie", "ssn", "card_number", "cvv",
}

// Pattern names a kind of sensitive string.
type Pattern string

// Patterns.
const (
	Email  Pattern = "email"
	Phone  Pattern = "phone"
	Card   Pattern = "card"
	SSN    Pattern = "ssn"
	Bearer Pattern = "bearer"
)

// AllPatterns are on when the config names none.
var AllPatterns = []Pattern{Bearer, Email, Card, SSN, Phone}

// The order matters: longer, more specific shapes first, so a card number
// is not half-eaten as a phone number.
var expressions = map[Pattern]*regexp.Regexp{
	// Bearer tokens, API-key-shaped strings, and credentials written as
	// key=value or key: value in free text.
	Bearer: regexp.MustCompile(`(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*|\b(sk|pk|ghp|xox[bap])[-_][A-Za-z0-9_\-]{10,}|\b(password|passwd|pwd|token|secret|api[_-]?key)\s*[=:]\s*[^\s,;"']+`),
	Email:  regexp.MustCompile(`(?i)[A-Z0-9._%+\-]+@[A-Z0-9.\-]+\.[A-Z]{2,}`),
	Card:   regexp.MustCompile(`\b(?:\d[ \-]?){12,18}\d\b`),
	SSN:    regexp.MustCompile(`\b\d{3}-\d{2}-\d{4}\b`),
	Phone:  regexp.MustCompile(`(?:\+\d{1,3}[ .\-]?)?(?:\(\d{3}\)|\b\d{3})[ .\-]\d{3}[ .\-]\d{4}\b|\b\d{3}-\d{4}\b`),
}

// Redactor redacts values. The zero value redacts nothing; use New.
type Redactor struct {
	keys     map[string]bool
	patterns []Pattern
}

// New makes a redactor for keys (compared case-insensitively) and patterns.
// Nil slices take the defaults; empty non-nil slices turn that half off.
func New(keys []string, patterns []Pattern) *Redactor {
	if keys == nil {
		keys = DefaultKeys
	}
	if patterns == nil {
		patterns = AllPatterns
	}
	r := &Redactor{keys: map[string]bool{}}
	for _, k := range keys {
		r.keys[strings.ToLower(k)] = true
	}
	for _, p := range AllPatterns { // keep the specific-first order
		if slices.Contains(patterns, p) {
			r.patterns = append(r.patterns, p)
		}
	}
	return r
}

// Known reports whether p is a pattern this package knows.
func Known(p Pattern) bool { _, ok := expressions[p]; return ok }

// String redacts the patterns in s.
func (r *Redactor) String(s string) (string, bool) {
	if r == nil {
		return s, false
	}
	changed := false
	var cues cues
	cues.scan(s)
	for _, p := range r.patterns {
		if !cues.allow(p, s) {
			continue
		}
		re := expressions[p]
		if !re.MatchString(s) {
			continue
		}
		s = re.ReplaceAllStringFunc(s, func(m string) string {
			// A digit run is a card number only if it passes the Luhn
			// check: ids and amounts mostly do not.
			if p == Card && !luhn(m) {
				return m
			}
			changed = true
			return "[" + string(p) + "]"
		})
	}
	return s, changed
}

// cues are what a string must hold before a pattern's expression can
// match it, counted in one pass: most strings in an event hold none (ids,
// tool names, short text), and the expressions, run on every string of
// every event, were a fifth of the CPU at sync=2m (docs/benchmarks.md).
// Each cue is necessary, never sufficient; TestCuesNeverHideAMatch and
// FuzzCuesNeverHideAMatch hold them to the expressions.
type cues struct {
	digits   int
	at       bool
	dash     bool
	nonASCII bool
}

func (c *cues) scan(s string) {
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b >= '0' && b <= '9':
			c.digits++
		case b == '@':
			c.at = true
		case b == '-':
			c.dash = true
		case b >= 0x80:
			c.nonASCII = true
		}
	}
}

// bearerWords are the words one of which every match of the Bearer
// expression contains, lower-cased.
var bearerWords = []string{"bearer", "sk-", "sk_", "pk-", "pk_", "ghp", "xox", "password", "passwd", "pwd", "token", "secret", "api"}

// allow reports whether p's expression could match s.
func (c *cues) allow(p Pattern, s string) bool {
	switch p {
	case Email:
		return c.at
	case Card:
		return c.digits >= 13
	case SSN:
		return c.digits >= 9 && c.dash
	case Phone:
		return c.digits >= 7
	case Bearer:
		if c.nonASCII {
			return true // (?i) folds some non-ASCII letters onto ASCII ones (ſ, K)
		}
		lower := strings.ToLower(s)
		for _, w := range bearerWords {
			if strings.Contains(lower, w) {
				return true
			}
		}
		return false
	}
	return true
}

// luhn reports whether the digits of s pass the Luhn checksum.
func luhn(s string) bool {
	sum, n, double := 0, 0, false
	for i := len(s) - 1; i >= 0; i-- {
		c := s[i]
		if c < '0' || c > '9' {
			continue
		}
		d := int(c - '0')
		if double {
			if d *= 2; d > 9 {
				d -= 9
			}
		}
		sum += d
		n++
		double = !double
	}
	return n >= 13 && sum%10 == 0
}

// idKey reports whether a key holds an identifier or a hash, whose value
// is loopgate's own and never scanned for patterns (a digit-heavy UUID is
// not a phone number).
func idKey(k string) bool {
	k = strings.ToLower(k)
	return k == "id" || strings.HasSuffix(k, "_id") || strings.HasSuffix(k, "_hash") || strings.HasSuffix(k, "_seq")
}

// JSON redacts a JSON document: values under sensitive keys become
// Marker, strings are scanned for patterns. A document that is not JSON is
// redacted as a string. The result is valid JSON when the input was.
func (r *Redactor) JSON(raw []byte) ([]byte, bool) {
	if r == nil || len(raw) == 0 {
		return raw, false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		s, changed := r.String(string(raw))
		return []byte(s), changed
	}
	v, changed := r.value(v)
	if !changed {
		return raw, false
	}
	out, err := json.Marshal(v)
	if err != nil {
		return raw, false
	}
	return out, true
}

func (r *Redactor) value(v any) (any, bool) {
	switch x := v.(type) {
	case string:
		return r.String(x)
	case []any:
		changed := false
		for i := range x {
			var c bool
			x[i], c = r.value(x[i])
			changed = changed || c
		}
		return x, changed
	case map[string]any:
		changed := false
		for k, e := range x {
			if r.keys[strings.ToLower(k)] {
				if e != nil && e != Marker {
					x[k] = Marker
					changed = true
				}
				continue
			}
			if _, ok := e.(string); ok && idKey(k) {
				continue
			}
			var c bool
			x[k], c = r.value(e)
			changed = changed || c
		}
		return x, changed
	}
	return v, false
}
