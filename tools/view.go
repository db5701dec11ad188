package tools

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"unicode/utf8"
)

// Apply shapes a tool's JSON result into the observation the model sees:
//
//   - an object keeps only the members named in v.Fields (all of them when
//     Fields is empty), in the order of Fields;
//   - an array has each object item projected the same way (items that are
//     arrays are projected item by item; scalars pass through), and when
//     v.MaxItems > 0 becomes {"count":<items>,"items":[<the first MaxItems>],
//     "truncated":<count > MaxItems>};
//   - a scalar passes through.
//
// Fields is a privacy boundary as much as a size one ("never the resident's
// phone"): a member not named never survives, in the object or in any
// object item of the (nested) arrays; the values of named members are kept
// whole. The output is compact JSON and depends only on v and result.
//
// Apply is meant to run on Bound's output too. An object that is exactly
// the wrapper Bound makes of a shortened array,
// {"items":[…],"total":N,"truncated":true}, is treated as that array with
// N items: at the top level, and as an item of an array (where Bound wraps
// a shortened inner array), whose wrapper is kept with its items
// projected. So Apply(Bound(x)) and Apply(x) have the same shape; Bound's
// last resort, {"truncated":true,"omitted_bytes":N}, passes through. Marks
// Bound adds inside an object ("truncated", "total") are not in Fields and
// do not survive a projection. Errors wrap ErrInvalidJSON.
func (v View) Apply(result []byte) ([]byte, error) {
	result = bytes.TrimSpace(result)
	if !json.Valid(result) {
		return nil, fmt.Errorf("apply view: %w: result is not valid JSON", ErrInvalidJSON)
	}
	var out bytes.Buffer
	var err error
	switch result[0] {
	case '{':
		var members map[string]json.RawMessage
		if err = json.Unmarshal(result, &members); err != nil {
			break
		}
		if items, total, ok := boundWrapper(members); ok {
			err = v.applyArray(&out, items, total, true)
			break
		}
		if len(v.Fields) == 0 || isLastResort(result) {
			err = json.Compact(&out, result)
			break
		}
		err = v.project(&out, members)
	case '[':
		var items []json.RawMessage
		if err = json.Unmarshal(result, &items); err == nil {
			err = v.applyArray(&out, items, len(items), false)
		}
	default:
		err = json.Compact(&out, result)
	}
	if err != nil {
		return nil, fmt.Errorf("apply view: %w: %v", ErrInvalidJSON, err)
	}
	return out.Bytes(), nil
}

// applyArray writes items as the view's array form. total is how many
// items the tool returned (more than len(items) when Bound already dropped
// some, which wasBounded says).
func (v View) applyArray(out *bytes.Buffer, items []json.RawMessage, total int, wasBounded bool) error {
	switch {
	case v.MaxItems <= 0 && wasBounded:
		return v.projectWrapped(out, items, total)
	case v.MaxItems <= 0:
		return v.projectItems(out, items)
	}
	out.WriteString(`{"count":`)
	out.WriteString(strconv.Itoa(total))
	out.WriteString(`,"items":`)
	if err := v.projectItems(out, items[:min(len(items), v.MaxItems)]); err != nil {
		return err
	}
	out.WriteString(`,"truncated":`)
	out.WriteString(strconv.FormatBool(total > v.MaxItems || wasBounded))
	out.WriteByte('}')
	return nil
}

// projectWrapped writes Bound's wrapper of a shortened array again, the
// items it kept projected to v.Fields and its total as it was.
func (v View) projectWrapped(out *bytes.Buffer, items []json.RawMessage, total int) error {
	out.WriteString(wrapOpen)
	if err := v.projectItems(out, items); err != nil {
		return err
	}
	out.WriteString(wrapTotal)
	out.WriteString(strconv.Itoa(total))
	out.WriteString(wrapClose)
	return nil
}

// projectItems writes items as an array, each projected to v.Fields. An
// item that is Bound's wrapper stands for an inner array Bound shortened:
// it is projected as that array, not as an object, which would keep none
// of its members (no Fields name "items") and leave {} of it.
func (v View) projectItems(out *bytes.Buffer, items []json.RawMessage) error {
	out.WriteByte('[')
	for i, item := range items {
		if i > 0 {
			out.WriteByte(',')
		}
		item = bytes.TrimSpace(item)
		var err error
		switch {
		case len(v.Fields) > 0 && item[0] == '{':
			var members map[string]json.RawMessage
			if err = json.Unmarshal(item, &members); err != nil {
				break
			}
			if inner, total, ok := boundWrapper(members); ok {
				err = v.projectWrapped(out, inner, total)
			} else {
				err = v.project(out, members)
			}
		case len(v.Fields) > 0 && item[0] == '[':
			var inner []json.RawMessage
			if err = json.Unmarshal(item, &inner); err == nil {
				err = v.projectItems(out, inner)
			}
		default:
			err = json.Compact(out, item)
		}
		if err != nil {
			return err
		}
	}
	out.WriteByte(']')
	return nil
}

// project writes the members of an object named in v.Fields, in that
// order. A missing field is left out rather than written as null: the view
// shows what the tool said, not what the config hoped for.
func (v View) project(out *bytes.Buffer, members map[string]json.RawMessage) error {
	out.WriteByte('{')
	n := 0
	for i, f := range v.Fields {
		val, ok := members[f]
		if !ok || slices.Contains(v.Fields[:i], f) {
			continue
		}
		if n > 0 {
			out.WriteByte(',')
		}
		n++
		appendString(out, f)
		out.WriteByte(':')
		if err := json.Compact(out, val); err != nil {
			return err
		}
	}
	out.WriteByte('}')
	return nil
}

// boundWrapper recognizes the members of the object Bound makes of a
// shortened array and returns the items it kept and the count it had.
// Nothing else of w survives a view: the items are projected like any
// array's, and the total is a count.
func boundWrapper(w map[string]json.RawMessage) (items []json.RawMessage, total int, ok bool) {
	if len(w) != 3 || string(w["truncated"]) != "true" {
		return nil, 0, false
	}
	if json.Unmarshal(w["items"], &items) != nil || items == nil {
		return nil, 0, false
	}
	if json.Unmarshal(w["total"], &total) != nil || total < len(items) {
		return nil, 0, false
	}
	return items, total, true
}

// isLastResort recognizes what Bound returns when nothing else fits; a
// view passes it through, or the model would see {} and not know why.
func isLastResort(raw []byte) bool {
	var w struct {
		Truncated    bool  `json:"truncated"`
		OmittedBytes int64 `json:"omitted_bytes"`
	}
	var keys map[string]json.RawMessage
	return json.Unmarshal(raw, &keys) == nil && len(keys) == 2 &&
		json.Unmarshal(raw, &w) == nil && w.Truncated && w.OmittedBytes > 0
}

// Bound returns doc unchanged when it is at most max bytes. Otherwise it
// returns valid JSON of at most max bytes and truncated = true, shrinking
// the largest parts first:
//
//   - items are dropped from the end of arrays; the object holding a
//     shortened array gains "truncated":true and "total":<original item
//     count> ("totals":{"<key>":N,…} when several of its arrays were
//     shortened). An array with no object to mark (the top level, an item
//     of another array) becomes {"items":[…],"total":N,"truncated":true};
//   - long strings are cut on a rune boundary and end with a visible marker,
//     "…[+123 bytes]" (bytes of the original string left out);
//   - within an object, members over a common size cap are cut down to it,
//     so one huge member does not starve the others;
//   - when dropping an array's last item would leave more than half of the
//     array's share unused, that item is shrunk into the room instead.
//
// Objects never lose members, so a document whose member names alone are
// over max gets the last resort. An object's "truncated" member is reused
// for the mark only when it is a boolean; otherwise (or with a "total" or
// "totals" of its own) its shortened arrays are wrapped in place. The text
// is never cut mid-token. When no shape fits (or doc is not valid
// JSON) the result is {"truncated":true,"omitted_bytes":<len(doc)>}; that
// is returned even when it is longer than max, so a max below about 48
// bytes cannot be honoured. A doc that only fits once its insignificant
// whitespace is removed comes back compacted, with truncated = false.
//
// Bound is pure and safe for concurrent use; it allocates a tree of doc
// only when doc is over max.
func Bound(doc []byte, max int) (out []byte, truncated bool) {
	if len(doc) <= max {
		return doc, false
	}
	root, err := parseTree(doc)
	if err != nil {
		return lastResort(len(doc)), true
	}
	if root.size <= max {
		return root.encode(nil), false
	}
	shrink(root, max)
	out = root.encode(make([]byte, 0, root.size))
	if len(out) > max {
		return lastResort(len(doc)), true
	}
	return out, true
}

// shrink plans root down to max bytes if it can.
func shrink(root *node, max int) {
	// plan shares budgets by estimates (what a member can shrink to, the
	// marks it will need); each retry asks for less by what the last missed.
	target := max
	for range 4 {
		plan(root, target)
		if root.size <= max || target <= 0 {
			return
		}
		target -= root.size - max
	}
}

// lastResort says how much was left out when nothing else fits.
func lastResort(omitted int) []byte {
	return fmt.Appendf(nil, `{"truncated":true,"omitted_bytes":%d}`, omitted)
}

// node is one value of a document being bounded, with its encoded size
// kept current as it shrinks.
type node struct {
	kind byte // 'o' object, 'a' array, 's' string, 'l' literal

	lit []byte // literal: number, true, false or null, as written

	str  string // string: the original value
	keep int    // string: bytes of str kept; len(str) when whole

	keys   []string // object: member names
	keyLen []int    // object: encoded length of each name
	kids   []*node  // object: member values; array: items kept
	total  int      // array: items originally
	inner  int      // array: encoded length of [items kept]

	// wrap: a shortened array shows it by becoming a wrapper object,
	// because its parent is no object that can carry the marks.
	wrap bool
	// overhead: the bytes an array's shortening adds, to its own text
	// (wrap) or as marks in the object holding it. With several arrays in
	// one object each takes a share of the common marks, so the sum is
	// exact only when all of them are shortened; Bound's retries absorb
	// the difference.
	overhead int
	// marks: this object shows its shortened arrays with members of its own.
	marks bool

	size    int // encoded length now
	minSize int // estimated cost once shrunk as far as plan takes it
}

func (n *node) shortened() bool { return n.kind == 'a' && len(n.kids) < n.total }

// cost is what n takes of its parent's budget: its size, plus the marks
// the parent writes for it if it is a shortened array.
func (n *node) cost() int {
	if n.shortened() && !n.wrap {
		return n.size + n.overhead
	}
	return n.size
}

// Fixed text around shortened arrays.
const (
	wrapOpen   = `{"items":`
	wrapTotal  = `,"total":`
	wrapClose  = `,"truncated":true}`
	markTrunc  = `,"truncated":true`
	markTotal  = `,"total":`
	markTotals = `,"totals":{`
)

// parseTree reads doc into nodes with their sizes. doc must be valid JSON.
func parseTree(doc []byte) (*node, error) {
	if !json.Valid(doc) {
		return nil, ErrInvalidJSON
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	return parseValue(dec)
}

// parseValue reads one value. Arrays come back as wrap; an object that can
// carry its arrays' marks resets that.
func parseValue(dec *json.Decoder) (*node, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	var n *node
	switch t := tok.(type) {
	case json.Delim:
		if t == '[' {
			n = &node{kind: 'a', wrap: true}
			for dec.More() {
				kid, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.kids = append(n.kids, kid)
			}
			n.total = len(n.kids)
			n.overhead = len(wrapOpen) + len(wrapTotal) + digits(n.total) + len(wrapClose)
		} else {
			n = &node{kind: 'o'}
			for dec.More() {
				tok, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key, _ := tok.(string)
				n.keys = append(n.keys, key)
				n.keyLen = append(n.keyLen, stringLen(key))
				kid, err := parseValue(dec)
				if err != nil {
					return nil, err
				}
				n.kids = append(n.kids, kid)
			}
			n.adoptArrays()
		}
		if _, err := dec.Token(); err != nil { // the closing delimiter
			return nil, err
		}
	case string:
		n = &node{kind: 's', str: t, keep: len(t)}
	case json.Number:
		n = &node{kind: 'l', lit: []byte(t)}
	case bool:
		n = &node{kind: 'l', lit: []byte(strconv.FormatBool(t))}
	case nil:
		n = &node{kind: 'l', lit: []byte("null")}
	}
	n.resize()
	n.minSize = n.estimateMin()
	return n, nil
}

// adoptArrays decides whether object o marks its shortened arrays itself:
// only when that overwrites nothing the tool said (no "total" or "totals"
// of its own, at most one "truncated", a boolean). Its arrays then leave
// the marks to it instead of wrapping themselves.
func (o *node) adoptArrays() {
	truncs, flag := 0, -1
	for i, k := range o.keys {
		switch k {
		case "total", "totals":
			return
		case "truncated":
			truncs++
			if lit := o.kids[i].lit; o.kids[i].kind != 'l' || (string(lit) != "true" && string(lit) != "false") {
				return
			}
			flag = i
		}
	}
	if truncs > 1 {
		return
	}
	o.marks = true
	flagCost := len(markTrunc)
	if flag >= 0 {
		// The tool's own flag is overwritten in place.
		flagCost = len("true") - o.kids[flag].size
	}
	arrays := 0
	for _, kid := range o.kids {
		if kid.kind == 'a' && kid.total > 0 {
			arrays++
		}
	}
	for i, kid := range o.kids {
		if kid.kind != 'a' {
			continue
		}
		kid.wrap = false
		if arrays <= 1 {
			kid.overhead = flagCost + len(markTotal) + digits(kid.total)
		} else {
			// Its entry in "totals" and a share of what the arrays have in
			// common: exact when all of them are shortened.
			// Entries are "key":N and a comma; one comma fewer than entries.
			shared := flagCost + len(markTotals) + len("}") - len(",")
			kid.overhead = o.keyLen[i] + 1 + digits(kid.total) + len(",") + (shared+arrays-1)/arrays
		}
		kid.minSize = kid.estimateMin()
	}
}

// resize recomputes n.size from its own state and its kids' sizes.
func (n *node) resize() {
	switch n.kind {
	case 'l':
		n.size = len(n.lit)
	case 's':
		n.size = stringLen(n.str)
		if n.keep < len(n.str) {
			n.size = cutStringLen(n.str, n.keep)
		}
	case 'a':
		n.inner = 2 + max(len(n.kids)-1, 0)
		for _, k := range n.kids {
			n.inner += k.size
		}
		n.sizeArray()
	case 'o':
		n.size = 2 + max(len(n.kids)-1, 0)
		for i, k := range n.kids {
			n.size += n.keyLen[i] + 1 + k.size
		}
		n.size += n.marksLen()
	}
}

// sizeArray sets an array's size from n.inner.
func (n *node) sizeArray() {
	n.size = n.inner
	if n.shortened() && n.wrap {
		n.size += n.overhead
	}
}

// marksLen is the length of the marks object n writes for its shortened
// arrays: as encode writes them.
func (n *node) marksLen() int {
	if !n.marks {
		return 0
	}
	count, names, total := 0, 0, 0
	for i, k := range n.kids {
		if k.shortened() {
			count++
			names += n.keyLen[i] + 1 + digits(k.total) // "key":N
			total = k.total
		}
	}
	if count == 0 {
		return 0
	}
	l := len(markTrunc)
	for i, k := range n.keys {
		if k == "truncated" {
			l = len("true") - n.kids[i].size
		}
	}
	if count == 1 {
		return l + len(markTotal) + digits(total)
	}
	return l + len(markTotals) + names + count - 1 + len("}")
}

// estimateMin is n's cost once shrunk as far as plan takes it: arrays
// empty, strings reduced to their marker. It guides how an object shares
// its budget; plan checks real sizes.
func (n *node) estimateMin() int {
	switch n.kind {
	case 's':
		return min(n.size, cutStringLen(n.str, 0))
	case 'a':
		if n.total == 0 {
			return 2
		}
		return 2 + n.overhead
	case 'o':
		m := 2 + max(len(n.kids)-1, 0)
		for i, k := range n.kids {
			m += n.keyLen[i] + 1 + k.minSize
		}
		return m
	}
	return n.size
}

// plan shrinks n, as far as it can, until its cost is at most budget.
func plan(n *node, budget int) {
	if n.cost() <= budget {
		return
	}
	switch n.kind {
	case 's':
		planString(n, budget)
	case 'a':
		planArray(n, budget)
	case 'o':
		planObject(n, budget)
	}
}

// planString keeps the longest prefix of the string (on a rune boundary)
// that fits with its marker.
func planString(n *node, budget int) {
	// e is the encoded length of str[:k], without quotes.
	k, e := 0, 0
	for k < len(n.str) {
		r, w := utf8.DecodeRuneInString(n.str[k:])
		re := runeLen(r, w)
		if 2+e+re+markerLen(len(n.str)-k-w) > budget {
			break
		}
		k, e = k+w, e+re
	}
	if cutStringLen(n.str, k) < stringLen(n.str) {
		n.keep = k
		n.resize()
	}
}

// planArray drops items from the end until the array fits. When dropping
// the last item would leave more than half the budget unused (one big item,
// say a nested document, after a few small ones), that item is shrunk into
// the room instead, so a large document does not collapse to its first few
// scalars.
func planArray(n *node, budget int) {
	for n.cost() > budget && len(n.kids) > 0 {
		last := n.kids[len(n.kids)-1]
		comma := min(len(n.kids)-1, 1)
		if without := n.inner - last.size - comma + n.overhead; without <= budget && without < budget/2 {
			before := last.size
			plan(last, budget-(n.cost()-last.size))
			n.inner += last.size - before
			n.sizeArray()
			if n.cost() <= budget {
				return
			}
		}
		// Kept current by hand: resize would make this quadratic.
		n.inner -= last.size + comma
		n.kids = n.kids[:len(n.kids)-1]
		n.sizeArray()
	}
}

// planObject cuts every member over a common cap down to the cap (water
// filling): the cap is the largest that makes the object fit, given what
// each member can shrink to, so one huge member does not starve the rest.
func planObject(n *node, budget int) {
	fixed := n.size - n.marksLen()
	for _, k := range n.kids {
		fixed -= k.size
	}
	limit := capFor(n.kids, budget-fixed)
	for _, k := range n.kids {
		plan(k, limit)
	}
	n.resize()
}

// capFor returns the largest c such that the kids, each cut to
// max(minSize, min(cost, c)), fit in avail; 0 when nothing does.
func capFor(kids []*node, avail int) int {
	need := func(c int) int {
		sum := 0
		for _, k := range kids {
			sum += max(k.minSize, min(k.cost(), c))
		}
		return sum
	}
	lo, hi := 0, 0
	for _, k := range kids {
		hi = max(hi, k.cost())
	}
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if need(mid) <= avail {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// encode appends n's JSON text to b.
func (n *node) encode(b []byte) []byte {
	switch n.kind {
	case 'l':
		return append(b, n.lit...)
	case 's':
		if n.keep < len(n.str) {
			return appendCutString(b, n.str, n.keep)
		}
		return appendStringBytes(b, n.str)
	case 'a':
		wrapped := n.shortened() && n.wrap
		if wrapped {
			b = append(b, wrapOpen...)
		}
		b = append(b, '[')
		for i, k := range n.kids {
			if i > 0 {
				b = append(b, ',')
			}
			b = k.encode(b)
		}
		b = append(b, ']')
		if wrapped {
			b = append(b, wrapTotal...)
			b = strconv.AppendInt(b, int64(n.total), 10)
			b = append(b, wrapClose...)
		}
		return b
	}
	// Object.
	var short []int
	if n.marks {
		for i, k := range n.kids {
			if k.shortened() {
				short = append(short, i)
			}
		}
	}
	b = append(b, '{')
	ownFlag := false
	for i, k := range n.kids {
		if i > 0 {
			b = append(b, ',')
		}
		b = appendStringBytes(b, n.keys[i])
		b = append(b, ':')
		if len(short) > 0 && n.keys[i] == "truncated" {
			b = append(b, "true"...)
			ownFlag = true
			continue
		}
		b = k.encode(b)
	}
	switch {
	case len(short) == 0:
	case len(short) == 1:
		if !ownFlag {
			b = append(b, markTrunc...)
		}
		b = append(b, markTotal...)
		b = strconv.AppendInt(b, int64(n.kids[short[0]].total), 10)
	default:
		if !ownFlag {
			b = append(b, markTrunc...)
		}
		b = append(b, markTotals...)
		for j, i := range short {
			if j > 0 {
				b = append(b, ',')
			}
			b = appendStringBytes(b, n.keys[i])
			b = append(b, ':')
			b = strconv.AppendInt(b, int64(n.kids[i].total), 10)
		}
		b = append(b, '}')
	}
	return append(b, '}')
}

// marker says how much of a cut string was left out.
func marker(omitted int) string { return fmt.Sprintf("…[+%d bytes]", omitted) }

func markerLen(omitted int) int { return len("…[+ bytes]") + digits(omitted) }

// cutStringLen is the encoded length of s cut to s[:keep] plus marker.
func cutStringLen(s string, keep int) int {
	return stringLen(s[:keep]) + markerLen(len(s)-keep)
}

func appendCutString(b []byte, s string, keep int) []byte {
	b = appendStringBytes(b, s[:keep])
	b = b[:len(b)-1] // reopen the string
	b = append(b, marker(len(s)-keep)...)
	return append(b, '"')
}

func digits(n int) int { return len(strconv.Itoa(n)) }

// stringLen is the length of s encoded by appendStringBytes, quotes
// included.
func stringLen(s string) int {
	l := 2
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		l += runeLen(r, w)
		i += w
	}
	return l
}

// runeLen is the encoded length of rune r, which took w bytes in the
// source.
func runeLen(r rune, w int) int {
	switch {
	case r == '"' || r == '\\' || r == '\b' || r == '\f' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	case r == utf8.RuneError && w == 1:
		return len("\ufffd")
	}
	return w
}

// appendStringBytes appends s as a JSON string. Unlike encoding/json it
// leaves <, > and & alone (observations are read by models, not embedded
// in HTML) and escapes only what JSON requires, and U+2028 and U+2029 as
// encoding/json does; invalid UTF-8 becomes U+FFFD.
func appendStringBytes(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		r, w := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == '"' || r == '\\':
			b = append(b, '\\', byte(r))
		case r == '\b':
			b = append(b, '\\', 'b')
		case r == '\f':
			b = append(b, '\\', 'f')
		case r == '\n':
			b = append(b, '\\', 'n')
		case r == '\r':
			b = append(b, '\\', 'r')
		case r == '\t':
			b = append(b, '\\', 't')
		case r < 0x20 || r == '\u2028' || r == '\u2029':
			// The line and paragraph separators as encoding/json, and the
			// events' encoder with it, writes them: a document cut to a
			// bound in bytes stays within it once it is stored.
			b = fmt.Appendf(b, `\u%04x`, r)
		case r == utf8.RuneError && w == 1:
			b = append(b, "\ufffd"...)
		default:
			b = append(b, s[i:i+w]...)
		}
		i += w
	}
	return append(b, '"')
}

func appendString(out *bytes.Buffer, s string) {
	out.Write(appendStringBytes(nil, s))
}
