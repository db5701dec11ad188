// Package redact keeps sensitive values out of the audit stream and, per
// profile, out of what the model reads. Values under sensitive keys
// (api_key, token, password, ssn, …) are replaced whole; strings anywhere
// are scanned for patterns — e-mail addresses, phone numbers (confirmed by
// libphonenumber, see phone.go), IBANs, card-like and SSN-like numbers,
// bearer tokens — and each match is replaced by a marker naming what was
// there ("[email]"); an object's names are strings too. Structure is
// kept: redacted JSON is still valid JSON of the same shape.
// docs/redaction.md describes each detector and its limits.
package redact

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/go-json-experiment/json/jsontext"
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
	IBAN   Pattern = "iban"
	Card   Pattern = "card"
	SSN    Pattern = "ssn"
	Bearer Pattern = "bearer"
)

// AllPatterns are on when the config names none, in the order they are
// looked for: longer, more specific shapes first, so that an IBAN is not
// half-eaten as a card number, nor a card number as a phone number.
var AllPatterns = []Pattern{Bearer, Email, IBAN, Card, SSN, Phone}

// detector finds one kind of sensitive string. allow is its cue (see
// cues): false only when replace would change nothing.
type detector struct {
	allow   func(c cues, s string) bool
	replace func(r *Redactor, s string) (string, bool)
}

// detectors are each pattern's, run in order.
var detectors = map[Pattern][]detector{
	// Bearer tokens, API-key-shaped strings, and credentials written as
	// key=value or key: value in free text, the key and the value quoted
	// or not: JSON inside a string (an HTTP body, a log line, a malformed
	// decision kept as text) writes "password":"…", which used to pass.
	Bearer: {expression(Bearer, `(?i)\bbearer\s+[A-Za-z0-9\-._~+/]{8,}=*|\b(sk|pk|ghp|xox[bap])[-_][A-Za-z0-9_\-]{10,}|\b(password|passwd|pwd|token|secret|api[_-]?key)["']?\s*[=:]\s*["']?[^\s,;"']+`)},
	Email:  {expression(Email, `(?i)[A-Z0-9._%+\-]+@[A-Z0-9.\-]+\.[A-Z]{2,}`)},
	IBAN:   {{allow: func(c cues, _ string) bool { return c.iban }, replace: func(_ *Redactor, s string) (string, bool) { return replaceFunc(ibanShape, s, ibanMarker) }}},
	Card:   {expression(Card, `\b(?:\d[ \-]?){12,18}\d\b`)},
	SSN:    {expression(SSN, `\b\d{3}-\d{2}-\d{4}\b`)},
	// The US shapes first: the library's detector is the costlier, and
	// what they take it need not look at.
	Phone: {
		{allow: func(c cues, _ string) bool { return c.phone }, replace: func(_ *Redactor, s string) (string, bool) { return usPhones(s) }},
		{allow: func(c cues, _ string) bool { return c.phoneLib }, replace: func(r *Redactor, s string) (string, bool) { return r.phones.replace(s) }},
	},
}

// expression is the detector of p that replaces the matches of expr.
func expression(p Pattern, expr string) detector {
	re := regexp.MustCompile(expr)
	return detector{
		allow: func(c cues, s string) bool { return c.allow(p, s) },
		replace: func(_ *Redactor, s string) (string, bool) {
			return replaceFunc(re, s, func(m string) string { return marker(p, m) })
		},
	}
}

// replaceFunc replaces each match m of re in s by to(m), and reports
// whether any changed.
func replaceFunc(re *regexp.Regexp, s string, to func(m string) string) (string, bool) {
	if !re.MatchString(s) {
		return s, false
	}
	replaced := false
	s = re.ReplaceAllStringFunc(s, func(m string) string {
		out := to(m)
		replaced = replaced || out != m
		return out
	})
	return s, replaced
}

// Redactor redacts values. The zero value redacts nothing; use New or
// NewFromConfig. It is safe for concurrent use.
type Redactor struct {
	keys       map[string]bool
	patterns   []Pattern
	idPatterns []Pattern // those scanned for under identifier names (see scannedFor)
	longKey    bool      // a key longer than maxKeyLen: plainlyQuiet steps aside
	phones     phones
}

// Config configures a Redactor.
type Config struct {
	// Keys whose values are replaced whole, compared case-insensitively.
	// An empty non-nil slice names none. Defaults to DefaultKeys.
	Keys []string
	// Patterns looked for in every string. An empty non-nil slice names
	// none. Defaults to AllPatterns.
	Patterns []Pattern
	// PhoneRegions are the regions (ISO 3166-1 alpha-2 codes, upper case)
	// whose nationally written numbers the phone pattern finds; a number
	// written with + or 00 is found whatever its region. An empty non-nil
	// slice names none. Defaults to DefaultPhoneRegions.
	PhoneRegions []string
}

// NewFromConfig makes a redactor as cfg (nil: all defaults) says. It
// fails on a pattern or a phone region it does not know, naming it.
func NewFromConfig(cfg *Config) (*Redactor, error) {
	var c Config
	if cfg != nil {
		c = *cfg
	}
	for _, p := range c.Patterns {
		if !Known(p) {
			return nil, fmt.Errorf("redact: unknown pattern %q", p)
		}
	}
	if c.PhoneRegions == nil {
		c.PhoneRegions = DefaultPhoneRegions
	}
	ph, err := newPhones(c.PhoneRegions)
	if err != nil {
		return nil, err
	}
	r := New(c.Keys, c.Patterns)
	r.phones = ph
	return r, nil
}

// New makes a redactor for keys (compared case-insensitively) and
// patterns, with the default phone regions. Nil slices take the defaults;
// empty non-nil slices turn that half off. A pattern it does not know is
// ignored (NewFromConfig refuses it).
func New(keys []string, patterns []Pattern) *Redactor {
	if keys == nil {
		keys = DefaultKeys
	}
	if patterns == nil {
		patterns = AllPatterns
	}
	r := &Redactor{keys: map[string]bool{}, phones: defaultPhones}
	for _, k := range keys {
		k = strings.ToLower(k)
		r.keys[k] = true
		r.longKey = r.longKey || len(k) > maxKeyLen
	}
	for _, p := range AllPatterns { // keep the specific-first order
		if slices.Contains(patterns, p) {
			r.patterns = append(r.patterns, p)
			if p == Email || p == Bearer || p == IBAN {
				r.idPatterns = append(r.idPatterns, p)
			}
		}
	}
	return r
}

// defaultPhones are DefaultPhoneRegions, prepared.
var defaultPhones = func() phones {
	p, err := newPhones(DefaultPhoneRegions)
	if err != nil {
		panic(err)
	}
	return p
}()

// Known reports whether p is a pattern this package knows.
func Known(p Pattern) bool { _, ok := detectors[p]; return ok }

// String redacts the patterns in s.
func (r *Redactor) String(s string) (string, bool) {
	if r == nil {
		return s, false
	}
	return r.replace(s, r.patterns)
}

// replace redacts patterns in s.
func (r *Redactor) replace(s string, patterns []Pattern) (string, bool) {
	if len(patterns) == 0 {
		return s, false
	}
	changed := false
	var c cues
	c.scan(s, &r.phones)
	for _, p := range patterns {
		for _, d := range detectors[p] {
			if !d.allow(c, s) {
				continue
			}
			out, replaced := d.replace(r, s)
			if !replaced {
				continue
			}
			// The cues read word boundaries, and a marker can make one:
			// in "a@b.io555-0121" the digits follow a letter, in
			// "[email]555-0121" a bracket. Read the new string afresh
			// (rare: most strings have nothing to replace).
			s, changed = out, true
			c = cues{}
			c.scan(s, &r.phones)
		}
	}
	return s, changed
}

// cues are what a string must hold before a pattern's expression can
// match it, found in one pass: most strings in an event hold none (ids,
// tool names, timestamps, short text), and the expressions, run on every
// string of every event, were a fifth of the CPU at sync=2m
// (docs/benchmarks.md). Each cue is necessary, never sufficient;
// TestCuesNeverHideAMatch and FuzzCuesNeverHideAMatch hold them to the
// expressions.
//
// The digit cues are read off digit runs: maximal runs of ASCII digits,
// which is what \d matches. \b is an ASCII word boundary, and a digit is
// a word character, so a \d next to \b is the first (or last) digit of
// a run whose neighbour is not a word byte (isWordByte) or is the end of
// the string. A run "starts a word" or "ends a word" in that sense.
type cues struct {
	// card: a chain of runs, each joined to the next by exactly one ' '
	// or '-', holds at least 13 digits from a run that starts a word to
	// a run that ends a word. `\b(?:\d[ \-]?){12,18}\d\b` matches 13
	// to 19 digits with at most one ' ' or '-' between neighbours, so a
	// match lies inside one chain; its first digit follows \b, so it
	// begins a run that starts a word (not mid-run: a digit precedes
	// that); its last digit precedes \b, so it ends a run that ends a
	// word.
	card bool
	// ssn: a run of 3 that starts a word, '-', a run of 2, '-', a run of
	// 4 that ends a word: `\b\d{3}-\d{2}-\d{4}\b`, where the dashes make
	// each group a whole run.
	ssn bool
	// phone: a run of 3 that starts a word, one of ' ', '.', '-', then a
	// run of 4 that ends a word. Both alternatives of usPhone end
	// so: `…[ .\-]\d{3}[ .\-]\d{4}\b` (a separator is not a word byte,
	// so the 3 digits after it start a word whichever of `\(\d{3}\)`
	// and `\b\d{3}` came before; the optional `\+\d{1,3}` prefix only
	// adds to the front) and `\b\d{3}-\d{4}\b`.
	phone bool
	// phoneLib: a candidate for the library's phone detector
	// (hasPhoneWindow), which holds at least minPhoneDigits digits.
	phoneLib bool
	// iban: a run of at least 2 digits that follows two ASCII letters
	// that start a word, as `\b[A-Za-z]{2}\d{2}` begins every match of
	// ibanShape.
	iban     bool
	at       bool
	nonASCII bool
}

// scan reads the cues of s, ph the phone regions looked for.
func (c *cues) scan(s string, ph *phones) { scanCues(c, s, ph) }

// scanCues is cues.scan for text held either way: a JSON document's bytes
// are scanned whole without a copy (see plainlyQuiet).
func scanCues[S ~string | ~[]byte](c *cues, s S, ph *phones) {
	var (
		prevEnd    = -2 // where the previous run ended; -2: no run yet
		prevHead3  bool // the previous run has 3 digits and starts a word
		prevSSNMid bool // the previous run has 2 digits and follows a prevHead3 run and '-'
		chain      int  // digits of the current card chain from its first run that starts a word
		digits     int  // in all
	)
	for i := 0; i < len(s); i++ {
		b := s[i]
		if !isDigit(b) {
			switch {
			case b == '@':
				c.at = true
			case b >= 0x80:
				c.nonASCII = true
			}
			continue
		}
		start := i
		for i+1 < len(s) && isDigit(s[i+1]) {
			i++
		}
		end := i + 1 // s[end], if any, is not a digit: the loop reads it next
		n := end - start
		digits += n
		if n >= 2 && start >= 2 && isLetter(s[start-1]) && isLetter(s[start-2]) && (start == 2 || !isWordByte(s[start-3])) {
			c.iban = true
		}
		startsWord := start == 0 || !isWordByte(s[start-1])
		endsWord := end == len(s) || !isWordByte(s[end])
		var sep byte // the one byte between this run and the previous, if one
		if start == prevEnd+1 {
			sep = s[start-1]
		}

		switch {
		case sep == ' ' || sep == '-':
			chain += n // a run after a separator starts a word
		case startsWord:
			chain = n
		default:
			chain = 0
		}
		if endsWord && chain >= 13 {
			c.card = true
		}
		if n == 4 && endsWord {
			if prevHead3 && (sep == ' ' || sep == '.' || sep == '-') {
				c.phone = true
			}
			if prevSSNMid && sep == '-' {
				c.ssn = true
			}
		}
		prevSSNMid = n == 2 && sep == '-' && prevHead3
		prevHead3 = n == 3 && startsWord
		prevEnd = end
	}
	if digits >= minPhoneDigits {
		c.phoneLib = hasPhoneWindow(ph, s)
	}
}

func isDigit(b byte) bool { return '0' <= b && b <= '9' }

// isWordByte reports whether b is a word character for \b: ASCII letters,
// digits and '_'. A byte of a multi-byte (or invalid) UTF-8 sequence is
// not: such runes are never word characters for \b.
func isWordByte(b byte) bool {
	return isDigit(b) || 'a' <= b && b <= 'z' || 'A' <= b && b <= 'Z' || b == '_'
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
		return c.card
	case SSN:
		return c.ssn
	case Phone:
		return c.phone || c.phoneLib
	case IBAN:
		return c.iban
	case Bearer:
		if c.nonASCII {
			return true // (?i) folds some non-ASCII letters onto ASCII ones (ſ, K)
		}
		// Lower-case into a buffer on the stack when s is short (most are):
		// strings.ToLower allocated for every string with a capital letter.
		var buf [256]byte
		lower := buf[:0]
		if len(s) > len(buf) {
			lower = make([]byte, 0, len(s))
		}
		for i := 0; i < len(s); i++ {
			b := s[i]
			if 'A' <= b && b <= 'Z' {
				b += 'a' - 'A'
			}
			lower = append(lower, b)
		}
		for _, w := range bearerWords {
			if bytes.Contains(lower, []byte(w)) {
				return true
			}
		}
		return false
	}
	return true
}

// marker is what m, a match of p's expression, becomes.
func marker(p Pattern, m string) string {
	if p == Card {
		return cardMarker(m)
	}
	return "[" + string(p) + "]"
}

// cardMarker is what m, a match of the Card expression, becomes. A digit
// run is a card number only if it passes the Luhn check: ids and amounts
// mostly do not. The expression takes the longest run it can, so a card
// number followed or preceded by another group ("4242 4242 4242 4242
// 123", a CVV or an expiry after it) used to fail the check whole and be
// kept, card number and all. When m fails, the runs of its whole groups
// that begin with its first group or end with its last, longest first,
// are tried, and the first written as a card number is (cardShaped) and
// passes is replaced. Only those: one in ten runs of digits passes Luhn
// by chance, and every run tried is another chance ("2026 11 02 0930
// 0001 17 42" holds one).
func cardMarker(m string) string {
	if luhn(m) {
		return "[card]"
	}
	// Where each group of digits starts and ends in m: the expression
	// puts at most one ' ' or '-' between two digits.
	var starts, ends []int
	for i := 0; i < len(m); i++ {
		if !isDigit(m[i]) {
			continue
		}
		starts = append(starts, i)
		for i+1 < len(m) && isDigit(m[i+1]) {
			i++
		}
		ends = append(ends, i+1)
	}
	last := len(starts) - 1
	for j := last - 1; j >= 0; j-- { // from the first group to group j
		if cardShaped(starts[:j+1], ends[:j+1]) && luhn(m[:ends[j]]) {
			return "[card]" + m[ends[j]:]
		}
	}
	for i := 1; i <= last; i++ { // from group i to the last
		if cardShaped(starts[i:], ends[i:]) && luhn(m[starts[i]:]) {
			return m[:starts[i]] + "[card]"
		}
	}
	return m
}

// cardShaped reports whether the groups of digits from starts to ends are
// grouped as card numbers are written: in one run, in fours with a last
// group of at most four, or as 4-6-5 (American Express) or 4-6-4 (Diners).
func cardShaped(starts, ends []int) bool {
	n := len(starts)
	size := func(i int) int { return ends[i] - starts[i] }
	if n == 1 || n == 3 && size(0) == 4 && size(1) == 6 && (size(2) == 5 || size(2) == 4) {
		return true
	}
	for i := range n {
		if size(i) != 4 && (i < n-1 || size(i) > 4) {
			return false
		}
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

// scannedFor returns the patterns a string directly under the name k
// (lower-cased) is scanned for. An identifier or a hash (…_id, …_hash,
// …_seq) is not scanned for the digit-shaped ones (a UUID or a sequence
// number is not a phone number), only for e-mail addresses and bearer
// tokens, which none of loopgate's identifiers looks like and a tool's
// "resident_id" may well hold: such values used to be skipped whole, in
// every document. A value under "id" alone is still never scanned: in the
// started event it is the task's principal, which a run resumed from its
// events acts for and checks approvers against (self-approval), and a
// principal may well be an e-mail address.
func (r *Redactor) scannedFor(k string) []Pattern {
	switch {
	case k == "id":
		return nil
	case strings.HasSuffix(k, "_id") || strings.HasSuffix(k, "_hash") || strings.HasSuffix(k, "_seq"):
		return r.idPatterns
	}
	return r.patterns
}

// JSON redacts a JSON document: values under sensitive keys become
// Marker, strings (names too) are scanned for patterns. A document that
// is not one JSON value (nothing but white space may follow it) is
// redacted as a string. The result is valid JSON when the input was.
func (r *Redactor) JSON(raw []byte) ([]byte, bool) {
	if r == nil || len(raw) == 0 {
		return raw, false
	}
	if r.plainlyQuiet(raw) || r.quiet(raw) {
		return raw, false
	}
	return r.rewrite(raw)
}

// plainlyQuiet reports whether raw, read as plain bytes, holds nothing any
// pattern or sensitive key could catch: then no string in it can, JSON or
// not, and JSON returns it unchanged without reading it as JSON. Most
// event data is such (ids, tool names, times, short text) and
// tokenizing it was most of what redaction still cost.
//
// It holds because every string of a document without a backslash is a
// run of the document's own bytes between two quotes: its digit runs are
// the document's, and a quote is, like the end of a string, neither a
// word byte nor a separator, so each cue a string has the whole document
// has too; an '@', a bearer word or a key name in a string is one in the
// document. Escapes would break that (the bytes differ from the string),
// and so would non-ASCII bytes (case folding beyond ASCII, see allow):
// with either, it says no and quiet decides. FuzzPlainlyQuietIsExact
// holds it to rewrite.
func (r *Redactor) plainlyQuiet(raw []byte) bool {
	if r.longKey || bytes.IndexByte(raw, '\\') >= 0 {
		return false
	}
	var c cues
	scanCues(&c, raw, &r.phones)
	if c.nonASCII {
		return false
	}
	for _, p := range r.patterns {
		switch p {
		case Bearer:
			if hasBearerWord(raw) {
				return false
			}
		case Email:
			if c.at && mayHoldEmail(raw) {
				return false
			}
		default:
			if c.allow(p, "") {
				return false
			}
		}
	}
	return !r.namesAKey(raw)
}

// hasBearerWord reports whether one of bearerWords begins, in any case, at
// a word boundary in s: every alternative of the Bearer expression begins
// with \b and one of them, so "input_tokens" cannot start a match.
func hasBearerWord(s []byte) bool {
	for i, b := range s {
		if !bearerFirst[b|0x20] || i > 0 && isWordByte(s[i-1]) {
			continue
		}
		for _, w := range bearerWords {
			if hasPrefixFold(s[i:], w) {
				return true
			}
		}
	}
	return false
}

// bearerFirst marks the first letters of bearerWords.
var bearerFirst = func() (first [256]bool) {
	for _, w := range bearerWords {
		first[w[0]] = true
	}
	return first
}()

// hasPrefixFold reports whether s begins with the lower-case ASCII word w,
// in any case.
func hasPrefixFold(s []byte, w string) bool {
	if len(s) < len(w) {
		return false
	}
	for i := range len(w) {
		b := s[i]
		if 'A' <= b && b <= 'Z' {
			b += 'a' - 'A'
		}
		if b != w[i] {
			return false
		}
	}
	return true
}

// mayHoldEmail reports whether an '@' in s is followed by what the Email
// expression needs after it: domain bytes ([A-Za-z0-9.-]) among which a
// '.' is followed by two letters. "supervisor@cityops" holds none.
func mayHoldEmail(s []byte) bool {
	for i, b := range s {
		if b != '@' {
			continue
		}
		for j := i + 1; j < len(s) && isDomainByte(s[j]); j++ {
			if s[j] == '.' && j+2 < len(s) && isLetter(s[j+1]) && isLetter(s[j+2]) {
				return true
			}
		}
	}
	return false
}

// namesAKey reports whether a string in s, a JSON document without
// backslashes, is a sensitive key in any case: such a string is the bytes
// between a quote and the next.
func (r *Redactor) namesAKey(s []byte) bool {
	if len(r.keys) == 0 {
		return false
	}
	var buf [maxKeyLen]byte
	for i := 0; i < len(s); i++ {
		if s[i] != '"' {
			continue
		}
		n := bytes.IndexByte(s[i+1:], '"')
		if n < 0 {
			return false
		}
		if n <= maxKeyLen {
			name := buf[:n]
			for k, b := range s[i+1 : i+1+n] {
				if 'A' <= b && b <= 'Z' {
					b += 'a' - 'A'
				}
				name[k] = b
			}
			if r.keys[string(name)] {
				return true
			}
		}
		i += n + 1 // the closing quote
	}
	return false
}

// maxKeyLen bounds the sensitive keys plainlyQuiet looks for; a redactor
// with a longer one leaves documents to quiet.
const maxKeyLen = 64

func isLetter(b byte) bool { return 'a' <= b|0x20 && b|0x20 <= 'z' }

func isDomainByte(b byte) bool { return isLetter(b) || isDigit(b) || b == '.' || b == '-' }

// quiet reports whether JSON would return raw unchanged, reading it once
// as a stream of tokens without building it. Most documents (every event's
// data passes through JSON) hold nothing to redact, and decoding them in
// full to find that out, then dropping what was built, was most of the
// cost of redaction. False means "maybe not": rewrite decides. It is true
// only for one strict JSON value (valid UTF-8, no duplicate names);
// anything else goes the long way, which has the last word on odd input.
func (r *Redactor) quiet(raw []byte) bool {
	dec := jsontext.NewDecoder(bytes.NewReader(raw))
	sensitive := false    // about the name the next value is under
	scanFor := r.patterns // likewise (see scannedFor)
	values := 0           // top-level values read
	for {
		depth := dec.StackDepth()
		if depth == 0 && values == 1 {
			_, err := dec.ReadToken()
			return err == io.EOF // one value, then nothing
		}
		kind, n := dec.StackIndex(depth)
		inObject := kind == '{'
		tok, err := dec.ReadToken()
		if err != nil {
			return false
		}
		if depth == 0 {
			values++
		}
		k := tok.Kind()
		switch {
		case k == '}' || k == ']':
			continue
		case inObject && n%2 == 0: // a name
			name := tok.String()
			if _, changed := r.String(name); changed {
				return false
			}
			lower := strings.ToLower(name)
			sensitive, scanFor = r.keys[lower], r.scannedFor(lower)
			continue
		case inObject && sensitive:
			// rewrite replaces the value by Marker unless it is null or
			// Marker already.
			if k != 'n' && (k != '"' || tok.String() != Marker) {
				return false
			}
			continue
		case k != '"':
			continue
		}
		patterns := r.patterns
		if inObject {
			patterns = scanFor
		}
		if _, changed := r.replace(tok.String(), patterns); changed {
			return false
		}
	}
}

// rewrite is JSON the long way: read the document whole, redacting as it
// goes, and encode it again if anything changed.
func (r *Redactor) rewrite(raw []byte) ([]byte, bool) {
	// Read as encoding/json would have it: a repeated name and invalid
	// UTF-8 (read as U+FFFD) are JSON still.
	dec := jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	v, changed, err := r.value(dec, r.patterns)
	if err == nil {
		// Text after the value is no part of it, and used to be left as
		// it was: a document is one value or it is text.
		if _, err = dec.ReadToken(); err == io.EOF {
			err = nil
		} else if err == nil {
			err = errors.New("more than one value")
		}
	}
	if err != nil {
		s, changed := r.String(string(raw))
		return []byte(s), changed
	}
	if !changed {
		return raw, false
	}
	// Without HTML escapes (jsontext's default): '<' as \u003c would make
	// a value six times its size, and what was bounded before redaction
	// unbounded after. With U+2028 and U+2029 escaped, as the events'
	// encoder (encoding/json) writes them: written raw (3 bytes, where a
	// stored event has 6), an observation or a result measured and bounded
	// here came out past its bound once stored.
	var out bytes.Buffer
	enc := jsontext.NewEncoder(&out, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true), jsontext.EscapeForJS(true))
	if err := write(enc, v); err != nil {
		// Not reached (what was read can be written), but if it were, no
		// part of the document goes out unredacted.
		return []byte(`"` + Marker + `"`), true
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n")), true
}

// A JSON value as rewrite reads it: nil, a bool, a string, a number
// (jsontext.Value, as written), []any or object.
type (
	// object keeps its members in order, a repeated name's too: decoded
	// into a map, only the last value of a name used to be redacted, and
	// the document, "unchanged", went out with a secret under an earlier
	// one.
	object []member
	member struct {
		name  string
		value any
	}
)

// value reads the next value from dec, redacted: if it is a string, it is
// scanned for patterns; strings within it for all of r's.
func (r *Redactor) value(dec *jsontext.Decoder, patterns []Pattern) (any, bool, error) {
	tok, err := dec.ReadToken()
	if err != nil {
		return nil, false, err
	}
	switch tok.Kind() {
	case 'n':
		return nil, false, nil
	case 't', 'f':
		return tok.Bool(), false, nil
	case '0':
		return jsontext.Value(tok.String()), false, nil
	case '"':
		s, changed := r.replace(tok.String(), patterns)
		return s, changed, nil
	case '[':
		list, changed := []any{}, false
		for dec.PeekKind() != ']' {
			v, c, err := r.value(dec, r.patterns)
			if err != nil {
				return nil, false, err
			}
			list, changed = append(list, v), changed || c
		}
		_, err := dec.ReadToken()
		return list, changed, err
	case '{':
		return r.object(dec)
	}
	return nil, false, fmt.Errorf("redact: unexpected %v", tok.Kind())
}

// object reads the rest of an object from dec, redacted, its '{' read.
func (r *Redactor) object(dec *jsontext.Decoder) (object, bool, error) {
	obj, changed := object{}, false
	for dec.PeekKind() != '}' {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil, false, err
		}
		name := tok.String()
		lower := strings.ToLower(name)
		var v any
		var c bool
		if r.keys[lower] {
			v, c, err = sensitiveValue(dec)
		} else {
			v, c, err = r.value(dec, r.scannedFor(lower))
		}
		if err != nil {
			return nil, false, err
		}
		obj, changed = append(obj, member{name, v}), changed || c
	}
	if _, err := dec.ReadToken(); err != nil {
		return nil, false, err
	}
	renamed := r.names(obj)
	return obj, changed || renamed, nil
}

// sensitiveValue reads the next value from dec, a sensitive key's: it
// becomes Marker unless it is null or Marker already.
func sensitiveValue(dec *jsontext.Decoder) (any, bool, error) {
	switch dec.PeekKind() {
	case 'n':
		_, err := dec.ReadToken()
		return nil, false, err
	case '"':
		tok, err := dec.ReadToken()
		return Marker, err == nil && tok.String() != Marker, err
	}
	return Marker, true, dec.SkipValue()
}

// names redacts the names of obj's members, strings like any other: a
// result keyed by e-mail address used to keep every address. A redacted
// name the object has already (two addresses are both "[email]") takes
// the first free "#2", "#3", … after it, so that no member is lost to a
// reader keeping one value per name. It reports whether any changed.
func (r *Redactor) names(obj object) bool {
	var renamed []int // the members whose names change, and to what
	var to []string
	for i, m := range obj {
		if name, changed := r.String(m.name); changed {
			renamed, to = append(renamed, i), append(to, name)
		}
	}
	if len(renamed) == 0 {
		return false
	}
	taken := make(map[string]bool, len(obj))
	for _, m := range obj {
		taken[m.name] = true
	}
	for k, i := range renamed {
		free := to[k]
		for n := 2; taken[free]; n++ {
			free = to[k] + "#" + strconv.Itoa(n)
		}
		taken[free] = true
		obj[i].name = free
	}
	return true
}

// write encodes v, as value read it, to enc.
func write(enc *jsontext.Encoder, v any) error {
	switch x := v.(type) {
	case nil:
		return enc.WriteToken(jsontext.Null)
	case bool:
		return enc.WriteToken(jsontext.Bool(x))
	case string:
		return enc.WriteToken(jsontext.String(x))
	case jsontext.Value:
		return enc.WriteValue(x)
	case []any:
		if err := enc.WriteToken(jsontext.BeginArray); err != nil {
			return err
		}
		for _, e := range x {
			if err := write(enc, e); err != nil {
				return err
			}
		}
		return enc.WriteToken(jsontext.EndArray)
	case object:
		if err := enc.WriteToken(jsontext.BeginObject); err != nil {
			return err
		}
		for _, m := range x {
			if err := enc.WriteToken(jsontext.String(m.name)); err != nil {
				return err
			}
			if err := write(enc, m.value); err != nil {
				return err
			}
		}
		return enc.WriteToken(jsontext.EndObject)
	}
	return fmt.Errorf("redact: cannot write a %T", v)
}
