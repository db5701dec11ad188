package worker

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/loopgate/loopgate/events"
)

// fastDecision reads a decision that is plainly valid without the JSON
// Schema validator: one pass over the tokens that checks what
// decision.schema.json says (the members allowed, exactly one of
// tool_calls and final_answer, the types, lengths and counts) and decodes
// as it goes. Every model turn is parsed, and the validator, which builds
// a tree of the output and then walks it, cost more than the rest of the
// parse.
//
// It only ever accepts: anything it does not recognise as valid (a
// duplicate member, invalid UTF-8, a member out of place, a limit
// exceeded) returns false, and parse then runs the schema, which decides
// and names the fields. So it must never accept what the schema refuses,
// and must decode what it accepts as encoding/json does;
// FuzzFastDecisionAgreesWithTheSchema holds it to both.
func fastDecision(out []byte) (*wireDecision, bool) {
	dec := jsontext.NewDecoder(bytes.NewReader(out))
	var w wireDecision
	var calls, final bool // present
	ok := readObject(dec, func(name string) bool {
		switch name {
		case "tool_calls":
			calls = true
			return readToolCalls(dec, &w)
		case "final_answer":
			final = true
			w.Final = &events.FinalAnswer{}
			return readFinal(dec, w.Final)
		}
		return false
	})
	if !ok || calls == final {
		return nil, false
	}
	if _, err := dec.ReadToken(); !errors.Is(err, io.EOF) {
		return nil, false // something after the decision
	}
	return &w, true
}

// readObject reads an object, calling member for each member's name with
// the decoder at the member's value; member reads the value and says
// whether it is acceptable.
func readObject(dec *jsontext.Decoder, member func(name string) bool) bool {
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return false
	}
	for dec.PeekKind() == '"' {
		tok, err := dec.ReadToken()
		if err != nil || !member(tok.String()) {
			return false
		}
	}
	tok, err := dec.ReadToken()
	return err == nil && tok.Kind() == '}'
}

// readArray reads an array of at most maxItems items, calling item for
// each with the decoder at the item; it returns the number read.
func readArray(dec *jsontext.Decoder, maxItems int, item func() bool) (int, bool) {
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '[' {
		return 0, false
	}
	n := 0
	for dec.PeekKind() != ']' {
		if n++; n > maxItems || !item() {
			return n, false
		}
	}
	tok, err := dec.ReadToken()
	return n, err == nil && tok.Kind() == ']'
}

// readString reads a string of minLen to maxLen characters (code points,
// as JSON Schema counts them).
func readString(dec *jsontext.Decoder, minLen, maxLen int) (string, bool) {
	if dec.PeekKind() != '"' {
		return "", false
	}
	tok, err := dec.ReadToken()
	if err != nil {
		return "", false
	}
	s := tok.String()
	n := utf8.RuneCountInString(s)
	return s, n >= minLen && n <= maxLen
}

func readToolCalls(dec *jsontext.Decoder, w *wireDecision) bool {
	n, ok := readArray(dec, 16, func() bool {
		var c wireCall
		var hasTool, hasArgs bool
		ok := readObject(dec, func(name string) bool {
			var ok bool
			switch name {
			case "tool":
				c.Tool, ok = readString(dec, 1, 128)
				hasTool = true
			case "args":
				if dec.PeekKind() != '{' {
					return false
				}
				v, err := dec.ReadValue()
				if err != nil {
					return false
				}
				c.Args, ok = json.RawMessage(bytes.Clone(v)), true
				hasArgs = true
			case "provider_id":
				c.ProviderID, ok = readString(dec, 0, 256)
			}
			return ok
		})
		w.ToolCalls = append(w.ToolCalls, c)
		return ok && hasTool && hasArgs
	})
	return ok && n >= 1
}

func readFinal(dec *jsontext.Decoder, f *events.FinalAnswer) bool {
	var hasSummary bool
	readStrings := func(into *[]string) bool {
		*into = []string{} // present, even empty: as encoding/json decodes it
		_, ok := readArray(dec, 64, func() bool {
			s, ok := readString(dec, 0, 1024)
			*into = append(*into, s)
			return ok
		})
		return ok
	}
	ok := readObject(dec, func(name string) bool {
		switch name {
		case "summary":
			var ok bool
			f.Summary, ok = readString(dec, 1, 16384)
			hasSummary = true
			return ok
		case "actions_taken":
			return readStrings(&f.ActionsTaken)
		case "drafts_created":
			return readStrings(&f.DraftsCreated)
		}
		return false
	})
	return ok && hasSummary
}
