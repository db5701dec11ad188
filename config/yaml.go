package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"regexp"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// maxYAMLJSON bounds the JSON that aliases may expand a config to: a file
// of nested aliases (a "billion laughs") is refused instead of filling
// memory. A real config is a few KiB.
const maxYAMLJSON = 16 << 20

// yamlToJSON converts raw, one YAML document, to JSON, reading scalars with
// the YAML 1.2 core schema: only true and false (True, TRUE, …) are
// booleans, so on, off, yes, no, y and n stay strings, and 2024-01-01 is a
// string, not a timestamp. Mapping keys are the text the file writes, in
// the file's order. Anchors and aliases are expanded, merge keys (<<)
// applied. An empty document is null.
//
// A duplicate key, a second document, a key that is not a scalar, an
// alias that contains itself, a tag other than the core schema's, and a
// number JSON cannot hold (.inf, .nan, past float64) are errors naming the
// line.
func yamlToJSON(raw []byte) ([]byte, error) {
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return []byte("null"), nil
	case err != nil:
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	}
	var next yaml.Node
	switch err := dec.Decode(&next); {
	case errors.Is(err, io.EOF):
	case err != nil:
		return nil, errors.New(strings.TrimPrefix(err.Error(), "yaml: "))
	default:
		return nil, fmt.Errorf("line %d: a second YAML document: the config is one document", next.Line)
	}
	w := jsonWriter{expanding: map[*yaml.Node]bool{}, written: map[*yaml.Node][]byte{}}
	if len(doc.Content) == 0 {
		return []byte("null"), nil
	}
	if err := w.value(doc.Content[0]); err != nil {
		return nil, err
	}
	return w.buf.Bytes(), nil
}

type jsonWriter struct {
	buf       bytes.Buffer
	expanding map[*yaml.Node]bool   // anchored nodes being written through an alias
	written   map[*yaml.Node][]byte // anchored nodes' JSON, once written through an alias
}

func (w *jsonWriter) value(n *yaml.Node) error {
	switch n.Kind {
	case yaml.AliasNode:
		target, err := w.enter(n)
		if err != nil {
			return err
		}
		defer delete(w.expanding, target)
		if b, ok := w.written[target]; ok {
			if w.buf.Len()+len(b) > maxYAMLJSON {
				return expansionError(n)
			}
			w.buf.Write(b)
			return nil
		}
		start := w.buf.Len()
		if err := w.value(target); err != nil {
			return err
		}
		if w.buf.Len() > maxYAMLJSON {
			return expansionError(n)
		}
		w.written[target] = bytes.Clone(w.buf.Bytes()[start:])
		return nil
	case yaml.ScalarNode:
		b, err := scalarJSON(n)
		if err != nil {
			return err
		}
		w.buf.Write(b)
		return nil
	case yaml.SequenceNode:
		if err := explicitTag(n, "!!seq"); err != nil {
			return err
		}
		w.buf.WriteByte('[')
		for i, e := range n.Content {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			if err := w.value(e); err != nil {
				return err
			}
		}
		w.buf.WriteByte(']')
		return nil
	case yaml.MappingNode:
		entries, err := w.entries(n)
		if err != nil {
			return err
		}
		w.buf.WriteByte('{')
		for i, e := range entries {
			if i > 0 {
				w.buf.WriteByte(',')
			}
			w.buf.Write(jsonString(e.key))
			w.buf.WriteByte(':')
			if err := w.value(e.value); err != nil {
				return err
			}
		}
		w.buf.WriteByte('}')
		return nil
	}
	return fmt.Errorf("line %d: unexpected YAML node", n.Line)
}

func expansionError(alias *yaml.Node) error {
	return fmt.Errorf("line %d: aliases expand the config past %d MiB", alias.Line, maxYAMLJSON>>20)
}

// enter returns the node alias n names, marked as being written; the
// caller unmarks it. An alias inside its own anchor's node is an error.
func (w *jsonWriter) enter(n *yaml.Node) (*yaml.Node, error) {
	if w.expanding[n.Alias] {
		return nil, fmt.Errorf("line %d: alias *%s is inside its own anchor", n.Line, n.Value)
	}
	w.expanding[n.Alias] = true
	return n.Alias, nil
}

type entry struct {
	key   string
	value *yaml.Node
}

// entries returns mapping m's entries in order. A merge key's (<<)
// mappings give their entries at its place, except the keys m sets
// itself; of several merged mappings, the first to set a key wins.
func (w *jsonWriter) entries(m *yaml.Node) ([]entry, error) {
	if err := explicitTag(m, "!!map"); err != nil {
		return nil, err
	}
	own := map[string]int{} // key → its line
	for i := 0; i < len(m.Content); i += 2 {
		k := m.Content[i]
		key, err := keyText(k)
		if err != nil {
			return nil, err
		}
		if line, dup := own[key]; dup {
			return nil, fmt.Errorf("line %d: key %q is already set at line %d", k.Line, key, line)
		}
		own[key] = k.Line
	}
	var out []entry
	merged := map[string]bool{}
	for i := 0; i < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		if !isMerge(k) {
			key, _ := keyText(k)
			out = append(out, entry{key, v})
			continue
		}
		sources := []*yaml.Node{v}
		if v.Kind == yaml.SequenceNode {
			sources = v.Content
		}
		for _, src := range sources {
			from, err := w.merged(src)
			if err != nil {
				return nil, err
			}
			for _, e := range from {
				if _, set := own[e.key]; !set && !merged[e.key] {
					merged[e.key] = true
					out = append(out, e)
				}
			}
		}
	}
	return out, nil
}

// merged returns the entries of src, the value of a merge key or one
// element of it: a mapping or an alias of one.
func (w *jsonWriter) merged(src *yaml.Node) ([]entry, error) {
	if src.Kind == yaml.AliasNode {
		target, err := w.enter(src)
		if err != nil {
			return nil, err
		}
		defer delete(w.expanding, target)
		src = target
	}
	if src.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("line %d: a merge key (<<) takes a mapping or a list of mappings", src.Line)
	}
	return w.entries(src)
}

func isMerge(k *yaml.Node) bool {
	return k.Kind == yaml.ScalarNode && k.Tag == "!!merge" && k.Style&quotedStyles == 0
}

// keyText returns the text of mapping key k: a key is a name, so 1, true
// and null as keys are the strings "1", "true" and "null".
func keyText(k *yaml.Node) (string, error) {
	if k.Kind == yaml.AliasNode && k.Alias != nil {
		k = k.Alias
	}
	if k.Kind != yaml.ScalarNode {
		return "", fmt.Errorf("line %d: a key must be a plain value, not a mapping or a list", k.Line)
	}
	return k.Value, nil
}

const quotedStyles = yaml.DoubleQuotedStyle | yaml.SingleQuotedStyle | yaml.LiteralStyle | yaml.FoldedStyle

// explicitTag refuses a tag on collection n other than want.
func explicitTag(n *yaml.Node, want string) error {
	if n.Style&yaml.TaggedStyle != 0 && n.Tag != want {
		return fmt.Errorf("line %d: tag %s is not supported", n.Line, n.Tag)
	}
	return nil
}

// The YAML 1.2 core schema's plain scalars (YAML 1.2.2, 10.3.2); anything
// else is a string.
var (
	coreNull  = regexp.MustCompile(`^(|~|null|Null|NULL)$`)
	coreBool  = regexp.MustCompile(`^(true|True|TRUE|false|False|FALSE)$`)
	coreDec   = regexp.MustCompile(`^[-+]?[0-9]+$`)
	coreOct   = regexp.MustCompile(`^0o[0-7]+$`)
	coreHex   = regexp.MustCompile(`^0x[0-9a-fA-F]+$`)
	coreFloat = regexp.MustCompile(`^[-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?$`)
	coreInf   = regexp.MustCompile(`^([-+]?\.(inf|Inf|INF)|\.(nan|NaN|NAN))$`)
)

// coreTag resolves plain scalar s by the core schema.
func coreTag(s string) string {
	if s != "" && !strings.ContainsRune("~nNtTfF+-.0123456789", rune(s[0])) {
		return "!!str"
	}
	switch {
	case coreNull.MatchString(s):
		return "!!null"
	case coreBool.MatchString(s):
		return "!!bool"
	case coreDec.MatchString(s), coreOct.MatchString(s), coreHex.MatchString(s):
		return "!!int"
	case coreFloat.MatchString(s), coreInf.MatchString(s):
		return "!!float"
	}
	return "!!str"
}

// scalarJSON returns scalar n as JSON. A quoted or block scalar is a
// string; a plain one resolves by the core schema; an explicit core tag
// must match its value (!!int 5, not !!int five).
func scalarJSON(n *yaml.Node) ([]byte, error) {
	tag := coreTag(n.Value)
	switch {
	case n.Style&yaml.TaggedStyle != 0:
		switch n.Tag {
		case "!!str":
			tag = "!!str"
		case "!!null", "!!bool", "!!int", "!!float":
			if tag != n.Tag {
				return nil, fmt.Errorf("line %d: %q is not a %s", n.Line, n.Value, n.Tag)
			}
		default:
			return nil, fmt.Errorf("line %d: tag %s is not supported", n.Line, n.Tag)
		}
	case n.Style&quotedStyles != 0:
		tag = "!!str"
	}
	switch tag {
	case "!!null":
		return []byte("null"), nil
	case "!!bool":
		return []byte(strings.ToLower(n.Value)), nil
	case "!!int":
		s, base := strings.TrimPrefix(n.Value, "+"), 10
		switch {
		case strings.HasPrefix(s, "0o"):
			s, base = s[2:], 8
		case strings.HasPrefix(s, "0x"):
			s, base = s[2:], 16
		}
		i, ok := new(big.Int).SetString(s, base)
		if !ok {
			return nil, fmt.Errorf("line %d: %q is not an integer", n.Line, n.Value)
		}
		return []byte(i.String()), nil
	case "!!float":
		f, err := strconv.ParseFloat(n.Value, 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Errorf("line %d: %s is not a number JSON can hold", n.Line, n.Value)
		}
		return json.Marshal(f)
	}
	return jsonString(n.Value), nil
}

// jsonString returns s as a JSON string, <, > and & as themselves.
func jsonString(s string) []byte {
	plain := true
	for i := 0; i < len(s) && plain; i++ {
		plain = s[i] >= 0x20 && s[i] < 0x7f && s[i] != '"' && s[i] != '\\'
	}
	if plain {
		return []byte(`"` + s + `"`)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a string always encodes
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}
