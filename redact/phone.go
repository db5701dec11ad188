package redact

import (
	"fmt"
	"regexp"
	"strings"
	"sync"

	"github.com/nyaruka/phonenumbers"
)

// DefaultPhoneRegions are the regions whose national formats the phone
// pattern looks for when the configuration names none: the United States,
// the United Kingdom, Ireland, France, Belgium, the Netherlands, Germany,
// Austria, Switzerland, Spain and Italy.
var DefaultPhoneRegions = []string{"US", "GB", "IE", "FR", "BE", "NL", "DE", "AT", "CH", "ES", "IT"}

// The phone pattern has two detectors, run in this order:
//
//   - usPhones is the expression for the US shapes: (415) 555-2671,
//     415.555.2671, +1 415 555 2671, 555-0121.
//   - phones.replace finds candidate numbers with a permissive scan
//     (nextRun, window) and asks libphonenumber whether each is a valid
//     number: written with + or 00, of any region; written nationally, of
//     one of the redactor's phone regions.

// usPhone matches the US shapes. A match followed by '-' and a digit is
// not taken: it is the head of a longer id ("311-2024-000123").
var usPhone = regexp.MustCompile(`(?:\+\d{1,3}[ .\-]?)?(?:\(\d{3}\)|\b\d{3})[ .\-]\d{3}[ .\-]\d{4}\b|\b\d{3}-\d{4}\b`)

// usPhones replaces the matches of usPhone in s.
func usPhones(s string) (string, bool) {
	idx := usPhone.FindAllStringIndex(s, -1)
	if idx == nil {
		return s, false
	}
	var b strings.Builder
	last := 0
	for _, m := range idx {
		if m[1]+1 < len(s) && s[m[1]] == '-' && isDigit(s[m[1]+1]) {
			continue
		}
		b.WriteString(s[last:m[0]])
		b.WriteString("[phone]")
		last = m[1]
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// A candidate phone number is a window of a run: consecutive chains of
// one run, at most maxWindow of them, holding minPhoneDigits to
// maxPhoneDigits digits, and in more than one group unless it begins
// with '+'.
//
// A chain is digit groups joined by one or two of ( ) . - / with at most
// one of . - /, optionally after a '+' or a '(': "+44", "(0)20",
// "030/1234", "06-12345678", "(030)". It counts only when it stands
// alone: the byte before it is not a word byte nor one of + - . /, the
// byte after it is not a word byte nor one of - . / before a word byte
// ("CMP-2026-000123", "0.42s" and "2026-11-30T06:30" hold none).
//
// A run is chains separated by one space (' ', U+00A0 or U+202F), a ')'
// allowed before the space: "+33 1 23 45 67 89", "(030) 12345678".
const (
	maxWindow      = 7
	minPhoneDigits = 8
	maxPhoneDigits = 17 // 15 for E.164, and a 00 prefix
	maxGroups      = 16 // a chain with more does not count
)

// chain is one chain of a run, as byte offsets into the text.
type chain struct {
	start, end int // from its first byte ('+', '(' or a digit) to just after its last digit
	digits     int
	groups     int
	plus       bool
	first      int  // digits in its first group
	value      int  // of its first group, when it has at most 4 digits
	date       bool // it is a date (isDate): "2026-11-30", "30.11.2026"
}

// nextRun returns the next run of s at or after from, its chains in buf
// (grown if need be), and where to look for the one after. dated reports
// whether the run holds a date: a chain that is one ("2026-11-02"), or,
// unless the run begins with '+', three chains of one group each that
// make one ("2026 11 02"). Such a run is a timestamp or an id, not a
// phone number. No run left: a nil run and len(s).
func nextRun[S ~string | ~[]byte](s S, from int, buf []chain) (run []chain, next int, dated bool) {
	run = buf[:0]
	i := from
	for i < len(s) {
		if len(run) == 0 {
			for i < len(s) && !chainStart[s[i]] {
				i++
			}
			if i == len(s) {
				break
			}
		}
		c, next, ok := scanChain(s, i)
		if c.end == 0 { // no chain starts at i
			if len(run) > 0 {
				return run, i, dated
			}
			i++
			continue
		}
		if !ok {
			if len(run) > 0 {
				return run, c.start, dated
			}
			i = next
			continue
		}
		run = append(run, c)
		dated = dated || c.date
		if k := len(run); k >= 3 && !run[0].plus {
			x, y, z := run[k-3], run[k-2], run[k-1]
			if x.groups == 1 && y.groups == 1 && z.groups == 1 && isDigit(s[x.start]) && isDigit(s[y.start]) && isDigit(s[z.start]) &&
				isDate([3]int{x.digits, y.digits, z.digits}, [3]int{x.value, y.value, z.value}) {
				dated = true
			}
		}
		i = next
		if gap := runGap(s, i); gap > 0 {
			i += gap
			continue
		}
		return run, i, dated
	}
	return run, len(s), dated
}

// runGap returns the length of the gap between chains of a run at i: an
// optional ')' and one space, before a chain's first byte. 0: none.
func runGap[S ~string | ~[]byte](s S, i int) int {
	j := i
	if j < len(s) && s[j] == ')' {
		j++
	}
	n := spaceAt(s, j)
	if n == 0 {
		return 0
	}
	j += n
	if j < len(s) && (isDigit(s[j]) || (s[j] == '+' || s[j] == '(') && j+1 < len(s) && isDigit(s[j+1])) {
		return j - i
	}
	return 0
}

// spaceAt returns the length of the space at s[i] (' ', U+00A0 or
// U+202F), or 0.
func spaceAt[S ~string | ~[]byte](s S, i int) int {
	switch {
	case i < len(s) && s[i] == ' ':
		return 1
	case i+1 < len(s) && s[i] == 0xc2 && s[i+1] == 0xa0:
		return 2
	case i+2 < len(s) && s[i] == 0xe2 && s[i+1] == 0x80 && s[i+2] == 0xaf:
		return 3
	}
	return 0
}

// chainStart marks the bytes a chain may start with.
var chainStart = func() (t [256]bool) {
	for b := '0'; b <= '9'; b++ {
		t[b] = true
	}
	t['+'], t['('] = true, true
	return t
}()

func isJoin(b byte) bool { return b == '-' || b == '.' || b == '/' }

func isChainSep(b byte) bool { return isJoin(b) || b == '(' || b == ')' }

// scanChain reads the chain that starts at s[i], if one does (c.end > 0),
// and returns where scanning goes on and whether the chain counts.
func scanChain[S ~string | ~[]byte](s S, i int) (c chain, next int, ok bool) {
	j := i
	if s[j] == '+' || s[j] == '(' {
		if j+1 >= len(s) || !isDigit(s[j+1]) {
			return chain{}, i + 1, false
		}
		c.plus = s[j] == '+'
		j++
	} else if !isDigit(s[j]) {
		return chain{}, i + 1, false
	}
	c.start = i
	var sizes, values [3]int // of the first three groups, for isDate
	var sep [2]byte          // the separators between them
	for {
		k := j
		v := 0
		for k < len(s) && isDigit(s[k]) {
			if k-j < 4 {
				v = v*10 + int(s[k]-'0')
			}
			k++
		}
		n := k - j
		if c.groups < len(sizes) {
			sizes[c.groups], values[c.groups] = n, v
		}
		if c.groups == 0 {
			c.value = v
		}
		if c.groups == 0 {
			c.first = n
		}
		c.groups++
		c.digits += n
		c.end = k
		// One or two separator bytes, at most one of - . /, then a digit.
		m, joins := k, 0
		for m < len(s) && m-k < 2 && isChainSep(s[m]) {
			if isJoin(s[m]) {
				joins++
			}
			m++
		}
		if m == k || joins > 1 || m >= len(s) || !isDigit(s[m]) {
			break
		}
		if c.groups <= len(sep) {
			sep[c.groups-1] = s[k]
			if m-k != 1 {
				sep[c.groups-1] = 0
			}
		}
		j = m
	}
	next = c.end
	ok = c.groups <= maxGroups && c.digits <= maxPhoneDigits
	if i > 0 {
		b := s[i-1]
		ok = ok && !isWordByte(b) && !isJoin(b) && b != '+'
	}
	if e := c.end; e < len(s) {
		b := s[e]
		ok = ok && !isWordByte(b) && !(isJoin(b) && e+1 < len(s) && isWordByte(s[e+1]))
	}
	c.date = c.groups == 3 && isDigit(s[i]) && sep[0] != 0 && sep[0] == sep[1] && isJoin(sep[0]) && isDate(sizes, values)
	return c, next, ok
}

// isDate reports whether three groups of digits of sizes and values read
// as a date: day, month and year in some order, the year of 4 digits
// from 1900 to 2099.
func isDate(sizes, values [3]int) bool {
	a, b, c := values[0], values[1], values[2]
	switch {
	case sizes[0] == 4 && sizes[1] <= 2 && sizes[2] <= 2: // 2026-11-30
		return 1900 <= a && a <= 2099 && 1 <= b && b <= 12 && 1 <= c && c <= 31
	case sizes[0] <= 2 && sizes[1] <= 2 && sizes[2] == 4: // 30.11.2026, 11/30/2026
		return 1900 <= c && c <= 2099 && 1 <= a && a <= 31 && 1 <= b && b <= 31 && (a <= 12 || b <= 12)
	}
	return false
}

// window reports whether chains, consecutive chains of a run of s, make
// a candidate phone number, and for which of p's regions: written with
// + or 00 (intl), for any; else for each region whose fixed-line or
// mobile numbers the digits have the form of (nationalForm), a bit set
// at its index in p.regions.
func window[S ~string | ~[]byte](p *phones, s S, chains []chain) (intl bool, regions uint64) {
	digits, groups := 0, 0
	for k, c := range chains {
		if k > 0 && c.plus {
			return false, 0
		}
		digits += c.digits
		groups += c.groups
	}
	if digits < minPhoneDigits || digits > maxPhoneDigits || groups == 1 && !chains[0].plus {
		return false, 0
	}
	// The digits alone.
	var buf [maxPhoneDigits]byte
	d := buf[:0]
	for i := chains[0].start; i < chains[len(chains)-1].end; i++ {
		if isDigit(s[i]) {
			d = append(d, s[i])
		}
	}
	if chains[0].plus || len(d) > 2 && d[0] == '0' && d[1] == '0' && d[2] != '0' {
		return true, 0
	}
	for k, r := range p.regions {
		if r.nationalForm(d) {
			regions |= 1 << k
		}
	}
	return false, regions
}

// hasPhoneWindow reports whether s holds a candidate phone number for p:
// the cue of phones.replace.
func hasPhoneWindow[S ~string | ~[]byte](p *phones, s S) bool {
	var buf [maxWindow * 2]chain
	for from := 0; from < len(s); {
		run, next, dated := nextRun(s, from, buf[:])
		if dated {
			run = nil
		}
		for i := range run {
			for j := i; j < len(run) && j-i < maxWindow; j++ {
				if intl, regions := window(p, s, run[i:j+1]); intl || regions != 0 {
					return true
				}
			}
		}
		from = next
	}
	return false
}

// phones is what the phone pattern's library detector knows of the
// regions it looks for national formats of.
type phones struct {
	regions []phoneRegion
}

type phoneRegion struct {
	code string
	// prefix is the region's national prefix ("0", "1" for the US, or
	// none), and prefixRequired whether a number written nationally
	// begins with it: true where it is "0".
	prefix         string
	prefixRequired bool
	// forms matches the national significant numbers of the region's
	// fixed-line and mobile numbers.
	forms *regexp.Regexp
}

// nationalForm reports whether d, the digits of a number written
// nationally, have the form of a fixed-line or mobile number of r.
func (r *phoneRegion) nationalForm(d []byte) bool {
	nsn := d
	if r.prefix != "" && len(d) > len(r.prefix) && string(d[:len(r.prefix)]) == r.prefix {
		nsn = d[len(r.prefix):]
	} else if r.prefixRequired {
		return false
	}
	return r.forms.Match(nsn)
}

// metadata is libphonenumber's metadata of every region, read once.
var metadata = sync.OnceValues(func() (map[string]*phonenumbers.PhoneMetadata, error) {
	coll, err := phonenumbers.MetadataCollection()
	if err != nil {
		return nil, fmt.Errorf("redact: read phone number metadata: %w", err)
	}
	byRegion := map[string]*phonenumbers.PhoneMetadata{}
	for _, m := range coll.GetMetadata() {
		byRegion[m.GetId()] = m
	}
	return byRegion, nil
})

// newPhones checks the region codes and prepares them.
func newPhones(regions []string) (phones, error) {
	if len(regions) > 64 {
		return phones{}, fmt.Errorf("redact: %d phone regions, more than the 64 a redactor takes", len(regions))
	}
	all, err := metadata()
	if err != nil {
		return phones{}, err
	}
	var p phones
	for _, code := range regions {
		m, ok := all[code]
		if !ok || code == "001" {
			return phones{}, fmt.Errorf("redact: %q is not a region phone numbers are known for (an ISO 3166-1 alpha-2 code, upper case)", code)
		}
		prefix := m.GetNationalPrefix()
		forms, err := regexp.Compile(`^(?:` + m.GetFixedLine().GetNationalNumberPattern() + `|` + m.GetMobile().GetNationalNumberPattern() + `)$`)
		if err != nil {
			return phones{}, fmt.Errorf("redact: phone region %s: %w", code, err)
		}
		p.regions = append(p.regions, phoneRegion{code: code, prefix: prefix, prefixRequired: prefix == "0", forms: forms})
	}
	return p, nil
}

// replace replaces each window of s that is a valid phone number,
// trying the longest from each chain first.
func (p *phones) replace(s string) (string, bool) {
	var b strings.Builder
	last := 0
	var buf [maxWindow * 2]chain
	for from := 0; from < len(s); {
		run, next, dated := nextRun(s, from, buf[:])
		if dated {
			run = nil
		}
		for i := 0; i < len(run); {
			j := min(i+maxWindow, len(run)) - 1
			for ; j >= i; j-- {
				w := run[i : j+1]
				if intl, regions := window(p, s, w); (intl || regions != 0) && p.valid(s, w, intl, regions) {
					break
				}
			}
			if j < i {
				i++
				continue
			}
			b.WriteString(s[last:run[i].start])
			b.WriteString("[phone]")
			last = run[j].end
			i = j + 1
		}
		from = next
	}
	if last == 0 {
		return s, false
	}
	b.WriteString(s[last:])
	return b.String(), true
}

// valid reports whether the window w of s is a valid phone number:
// written with + or 00 (intl), of any region; else of one of the regions
// (a bit set per index in p.regions), written nationally as that region
// writes its numbers: its national prefix where the region requires one,
// and the area code not run into the number after it (the first group of
// digits begins the first group the library formats the number with).
func (p *phones) valid(s string, w []chain, intl bool, regions uint64) bool {
	// The digits, a space between groups: the library reads the rest
	// (parentheses, dots, slashes) as it would read the spaces.
	var b strings.Builder
	for i := w[0].start; i < w[len(w)-1].end; i++ {
		switch c := s[i]; {
		case isDigit(c):
			b.WriteByte(c)
		case b.Len() > 0 && !strings.HasSuffix(b.String(), " "):
			b.WriteByte(' ')
		}
	}
	number := b.String()
	if intl {
		if !w[0].plus {
			number = strings.TrimLeft(number[2:], " ") // the 00
		}
		n, err := phonenumbers.Parse("+"+number, "ZZ")
		return err == nil && phonenumbers.IsValidNumber(n)
	}
	first := number[:w[0].first]
	for k, r := range p.regions {
		if regions&(1<<k) == 0 {
			continue
		}
		n, err := phonenumbers.ParseAndKeepRawInput(number, r.code)
		if err != nil || !phonenumbers.IsValidNumberForRegion(n, r.code) || !phonenumbers.IsNationalPrefixPresentIfRequired(n) {
			continue
		}
		if strings.HasPrefix(firstDigitGroup(phonenumbers.Format(n, phonenumbers.NATIONAL)), first) {
			return true
		}
	}
	return false
}

// firstDigitGroup returns the first run of digits in s.
func firstDigitGroup(s string) string {
	i := strings.IndexFunc(s, func(r rune) bool { return '0' <= r && r <= '9' })
	if i < 0 {
		return ""
	}
	j := i
	for j < len(s) && isDigit(s[j]) {
		j++
	}
	return s[i:j]
}
