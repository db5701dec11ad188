// Package guard inspects what comes back from tools before a model reads
// it. Tool output is data, never instructions: loopgate hands it to the
// model under "data", and flags content that looks like an attempt to
// steer the model — "ignore previous instructions", chat role markers,
// text shaped like a tool call. A run whose context holds flagged content
// is tainted: from then on every write in it needs a human's approval.
//
// The checks match English phrases, so a paraphrase or another language
// passes them. They are an extra signal: what gates writes after
// third-party text is the tool's manifest declaring untrusted_output,
// whatever the text's wording (worker, docs/taint.md).
package guard

import (
	"bytes"
	"encoding/json"
	"io"
	"regexp"
	"slices"
	"strings"
	"unicode/utf8"
)

// Flag names a kind of suspicious content.
type Flag string

// Flags.
const (
	// Override: text telling the reader to drop its instructions.
	Override Flag = "instruction_override"
	// RoleMarker: chat-template or role markers that try to open a new turn.
	RoleMarker Flag = "role_marker"
	// ToolCall: text shaped like a tool call or a decision.
	ToolCall Flag = "tool_call_shape"
)

// A detector raises flag when re matches. Almost no tool output holds
// anything re could match, so re runs only where its cues hold: cheap
// conditions read off the expression, each necessary for a match, never
// sufficient. TestCuesNeverHideAFlag and FuzzCuesNeverHideAFlag hold them
// to that: with or without cues, the flags are the same.
//
// Cues are given the input after fold and look for lower-case ASCII
// literals (and runes without case, such as ｜): wherever re matches a
// literal, (?i) and all, fold has left that literal in lower case.
type detector struct {
	flag Flag
	re   *regexp.Regexp
	// cue is necessary for re to match a text; it is given fold(text).
	cue func(folded string) bool
	// rawCue is necessary for re to match whatever text InspectJSON builds
	// from a raw document: raw itself, when it is not JSON, so rawCue must
	// follow from cue; or the document's decoded strings joined by
	// newlines (in document order; the cue holds for any order). It is
	// given fold(raw), or fold of raw with its \u escapes spelled out (see
	// rawMayFlag). So it looks only for literals that
	// lie within one decoded string — no newline, no \s* that could run on
	// into the next string — and that a decoded string holds only if its
	// raw spelling does: no '"', '\\', '/' or control characters, which
	// JSON may also spell \" \\ \/ \n ... (letters, digits, ' ', '_',
	// '<', '|', '[', ']', '#', ':' and non-ASCII runes such as '｜' are
	// spelled only as themselves or \uXXXX).
	rawCue func(folded string) bool
}

var detectors = []detector{{
	flag: Override,
	re:   regexp.MustCompile(`(?i)\b(ignore|disregard|forget|override)\b[^.\n]{0,40}\b(previous|prior|above|earlier|all|your|the)\b[^.\n]{0,20}\b(instructions?|prompts?|rules|directions)\b`),
	// A match holds one of the four verbs and one of the four nouns
	// (instructions? and prompts? hold their stems). [^.\n] keeps a match
	// on one line, so within one decoded string: fit for raw documents.
	cue:    overrideCue,
	rawCue: overrideCue,
}, {
	flag: Override,
	re:   regexp.MustCompile(`(?i)\byou are now\b|\bnew instructions?\s*:|\bsystem prompt\b`),
	// Each alternative holds its phrase (with literal spaces; "new
	// instructions?" holds "new instruction"). No newline, no quote: fit
	// for raw documents.
	cue:    phraseCue,
	rawCue: phraseCue,
}, {
	flag: RoleMarker,
	re:   regexp.MustCompile(`(?i)<` + tagBar + `?(` + strings.Join(chatTags, "|") + `)` + tagBar + `?>|(^|\n)\s*(system|assistant|developer)\s*:|\[/?INST\]|###\s*(instruction|system)`),
	// One cue for each alternative, read straight off it (the first
	// dropping the closing bar and '>', the second the line start).
	cue: func(f string) bool {
		return chatTag(f) || // <[|｜]?(chatTags...)
			// (^|\n)\s*(system|assistant|developer)\s*:
			spaceThen(f, "system", ":") || spaceThen(f, "assistant", ":") || spaceThen(f, "developer", ":") ||
			containsAny(f, "[inst]", "[/inst]") || // \[/?INST\]
			// ###\s*(instruction|system)
			spaceThen(f, "###", "instruction") || spaceThen(f, "###", "system")
	},
	// In a decoded document \s* may run on from one string into the next
	// (["system", ":"] reads "system\n:\n"), and '/' may be spelled \/:
	// keep what must lie within one string, and no '/'.
	rawCue: func(f string) bool {
		return chatTag(f) ||
			containsAny(f, "system", "assistant", "developer") ||
			strings.Contains(f, "inst]") ||
			strings.Contains(f, "###")
	},
}, {
	flag: ToolCall,
	re:   regexp.MustCompile(`(?i)"(tool_calls|final_answer|function_call)"\s*:|"tool"\s*:\s*"[a-z_]+"\s*,\s*"(args|arguments)"`),
	// The first alternative is a quoted name and a colon; the second
	// begins with "tool" and a colon and ends with a quoted "args" or
	// "arguments".
	cue: func(f string) bool {
		return spaceThen(f, `"tool_calls"`, ":") || spaceThen(f, `"final_answer"`, ":") || spaceThen(f, `"function_call"`, ":") ||
			spaceThen(f, `"tool"`, ":") && containsAny(f, `"args"`, `"arguments"`)
	},
	// In a raw document a '"' inside a string is spelled \", and \s*:
	// may lie in the next string: keep the bare names.
	rawCue: func(f string) bool {
		return containsAny(f, "tool_calls", "final_answer", "function_call") ||
			strings.Contains(f, "tool") && containsAny(f, "args", "arguments")
	},
}}

func overrideCue(f string) bool {
	return containsAny(f, "ignore", "disregard", "forget", "override") &&
		containsAny(f, "instruction", "prompt", "rules", "directions")
}

func phraseCue(f string) bool {
	return containsAny(f, "you are now", "new instruction", "system prompt")
}

// InspectJSON returns the flags raised by any string in a JSON document
// (keys and values, decoded as the model would read them). A document that
// is not JSON is inspected as text.
func InspectJSON(raw []byte) []Flag {
	if !rawMayFlag(raw) {
		return nil
	}
	text, ok := jsonText(raw)
	if !ok {
		return Inspect(string(raw))
	}
	return Inspect(text)
}

// jsonText joins the names and strings of a JSON document, decoded, one
// per line, in the order the document holds them: the order a model reads
// them in, and the same on every call. (Walking a decoded map instead gave
// its random order, and an expression can span two strings: a document
// could be flagged on one call and not on the next.) False when raw is
// not one JSON value.
func jsonText(raw []byte) (string, bool) {
	if !json.Valid(raw) {
		return "", false
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var b strings.Builder
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return b.String(), true
		}
		if err != nil {
			return "", false
		}
		if s, ok := tok.(string); ok {
			b.WriteString(s)
			b.WriteByte('\n')
		}
	}
}

// rawMayFlag reports whether InspectJSON must decode raw: false when no
// text it could build from raw can raise a flag. Most documents can be
// passed without decoding them: decoding only replaces escapes, and of the
// escapes only \uXXXX can spell a letter (or '<', '|', '#', ...). Without
// one, each literal a rawCue looks for is in raw wherever it is in a
// decoded string (see detector); with some, it is in raw with those
// escapes spelled out (spellOutU). So a tool result that Go's
// json.Marshal wrote, '&' and '<' as \u0026 and \u003c, is not decoded
// for them.
func rawMayFlag(raw []byte) bool {
	if anyRawCue(fold(raw)) {
		return true
	}
	if !bytes.Contains(raw, []byte(`\u`)) {
		return false
	}
	return anyRawCue(fold(spellOutU(raw)))
}

// anyRawCue reports whether some detector's rawCue holds for folded.
func anyRawCue(folded string) bool {
	return slices.ContainsFunc(detectors, func(d detector) bool { return d.rawCue(folded) })
}

// spellOutU returns raw with each \uXXXX escape replaced by the rune it
// spells, in UTF-8 (a surrogate half, which no rawCue literal holds, by
// U+FFFD), and every other escape kept as its two bytes ("\\u0069" stays
// as it is: an escaped backslash, then "u0069"). In a JSON document a
// backslash outside a string is an error, so reading escapes from the
// first byte on finds the ones the decoder would. A document that is not
// JSON was already judged on raw itself (see rawMayFlag).
func spellOutU(raw []byte) []byte {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' || i+1 == len(raw) {
			out = append(out, c)
			continue
		}
		if r, ok := hex4(raw[i+2:]); raw[i+1] == 'u' && ok {
			out = utf8.AppendRune(out, r)
			i += 5
			continue
		}
		out = append(out, c, raw[i+1])
		i++
	}
	return out
}

// hex4 decodes the four hex digits b begins with.
func hex4(b []byte) (rune, bool) {
	if len(b) < 4 {
		return 0, false
	}
	var r rune
	for _, c := range b[:4] {
		switch {
		case '0' <= c && c <= '9':
			r = r<<4 | rune(c-'0')
		case 'a' <= c && c <= 'f':
			r = r<<4 | rune(c-'a'+10)
		case 'A' <= c && c <= 'F':
			r = r<<4 | rune(c-'A'+10)
		default:
			return 0, false
		}
	}
	return r, true
}

// Inspect returns the flags raised by text, sorted and without repeats.
func Inspect(text string) []Flag {
	var flags []Flag
	folded := fold(text)
	for _, d := range detectors {
		if !slices.Contains(flags, d.flag) && d.cue(folded) && d.re.MatchString(text) {
			flags = append(flags, d.flag)
		}
	}
	slices.Sort(flags)
	return flags
}

// fold returns s with what (?i) matches to an ASCII letter replaced by
// that letter in lower case: A-Z, and the two non-ASCII runes whose case
// folds onto an ASCII letter, ſ (U+017F, like s) and K (U+212A Kelvin, like
// k). Every other byte is kept, so a non-ASCII byte never looks like part
// of an ASCII literal. TestFoldMatchesCaseFolding checks the pair against
// all of Unicode.
func fold[T string | []byte](s T) string {
	const longS, kelvin = "\u017f", "\u212a"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'A' <= c && c <= 'Z':
			c += 'a' - 'A'
		case c < 0x80:
		case hasAt(s, i, longS):
			c, i = 's', i+len(longS)-1
		case hasAt(s, i, kelvin):
			c, i = 'k', i+len(kelvin)-1
		}
		b.WriteByte(c)
	}
	return b.String()
}

// hasAt reports whether s holds lit at i.
func hasAt[T string | []byte](s T, i int, lit string) bool {
	return len(s)-i >= len(lit) && string(s[i:i+len(lit)]) == lit
}

// chatTags are the names in the special tokens that open or close a turn
// in the chat templates of the models loopgate's providers serve (Ollama,
// vLLM, llama.cpp): written <name>, <|name|> or, in DeepSeek's,
// <｜name｜>. Each is a lower-case literal, as the cues need.
var chatTags = []string{
	"im_start", "im_end", // ChatML (Qwen, many fine-tunes)
	"system", "assistant", "user", // Phi-3, Zephyr; DeepSeek's <｜User｜>, <｜Assistant｜>
	"start_header_id", "end_header_id", "eot_id", // Llama 3
	"start_of_turn", "end_of_turn", // Gemma
}

// tagBar is the optional bar around a chat tag's name: ASCII, or the
// full-width ｜ (U+FF5C) of DeepSeek's templates. Like '<', ｜ has no case
// (?i) could match, fold keeps its bytes, and JSON spells it only as
// itself or \uff5c: fit for cues and raw cues.
const tagBar = `[|｜]`

// chatTag reports whether s holds '<', maybe a bar, and a chat tag's name:
// <[|｜]?(chatTags...).
func chatTag(s string) bool {
	for {
		i := strings.IndexByte(s, '<')
		if i < 0 {
			return false
		}
		s = s[i+1:]
		tag, ok := strings.CutPrefix(s, "|")
		if !ok {
			tag = strings.TrimPrefix(s, "｜")
		}
		if slices.ContainsFunc(chatTags, func(name string) bool { return strings.HasPrefix(tag, name) }) {
			return true
		}
	}
}

// containsAny reports whether s contains any of subs.
func containsAny(s string, subs ...string) bool {
	return slices.ContainsFunc(subs, func(sub string) bool { return strings.Contains(s, sub) })
}

// reSpace is what \s matches in RE2 syntax: ASCII only, even under (?i).
const reSpace = "\t\n\f\r "

// spaceThen reports whether s contains word followed by any run of \s
// characters and then next: a necessary condition for word\s*next.
func spaceThen(s, word, next string) bool {
	for {
		i := strings.Index(s, word)
		if i < 0 {
			return false
		}
		if strings.HasPrefix(strings.TrimLeft(s[i+len(word):], reSpace), next) {
			return true
		}
		s = s[i+1:] // occurrences may overlap ("####")
	}
}
