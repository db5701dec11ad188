package tools

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/gowebpki/jcs"
)

// MaxDepth bounds how deeply arrays and objects may nest in canonicalized
// JSON. Tool arguments are flat in practice; a deep document is a model
// running away or someone probing the parser.
const MaxDepth = 32

// Canonicalization errors. Every error from Canonical wraps exactly one of
// them.
var (
	// ErrInvalidJSON: the input is not a single valid I-JSON value (bad
	// syntax, a duplicate object key, invalid UTF-8, a lone surrogate, a
	// number outside float64).
	ErrInvalidJSON = errors.New("invalid JSON")
	// ErrTooDeep: arrays and objects nest deeper than MaxDepth.
	ErrTooDeep = errors.New("JSON nests too deeply")
)

// Canonical returns the RFC 8785 (JCS) canonical form of raw: no
// insignificant whitespace, object members sorted by the UTF-16 code units
// of their names, numbers in ECMAScript form (1e+21, 0.000001, -0 as 0),
// strings with only the escapes JCS requires. Two documents mean the same
// arguments exactly when their canonical forms are equal, which is what an
// approval and an idempotency key are bound to.
//
// It is stricter than encoding/json on purpose: duplicate object keys,
// invalid UTF-8 and lone surrogates are rejected rather than resolved
// silently, since a validator and an executor that resolved them
// differently would see different arguments under one hash. Errors wrap
// ErrInvalidJSON or ErrTooDeep, and their text quotes at most a short,
// escaped fragment of the input, so it may be shown to a model.
//
// Canonical is pure and safe for concurrent use.
func Canonical(raw []byte) ([]byte, error) {
	// Checked before the parser runs so that a deep document is refused in
	// one linear scan, whatever else is wrong with it.
	if depth(raw) > MaxDepth {
		return nil, fmt.Errorf("%w: more than %d levels", ErrTooDeep, MaxDepth)
	}
	if raw == nil {
		// jcs treats nil and empty differently; callers should not have to.
		raw = []byte{}
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", ErrInvalidJSON, err.Error())
	}
	return out, nil
}

// Hash names canonical JSON: "sha256:" and the lowercase hex SHA-256 of the
// bytes. It does not canonicalize; pass it Canonical's output (or use
// CanonicalHash) or the hash names the spelling, not the value.
func Hash(canonical []byte) string {
	sum := sha256.Sum256(canonical)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CanonicalHash is Canonical followed by Hash.
func CanonicalHash(raw []byte) (canonical []byte, hash string, err error) {
	canonical, err = Canonical(raw)
	if err != nil {
		return nil, "", err
	}
	return canonical, Hash(canonical), nil
}

// depth returns the deepest nesting of arrays and objects in raw, skipping
// string contents. On invalid JSON the figure is only an estimate; the
// parser reports what is actually wrong.
func depth(raw []byte) int {
	d, deepest := 0, 0
	inString, escaped := false, false
	for _, c := range raw {
		if inString {
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
			continue
		}
		switch c {
		case '"':
			inString = true
		case '[', '{':
			d++
			deepest = max(deepest, d)
		case ']', '}':
			d--
		}
	}
	return deepest
}
