// Package schemas holds loopgate's JSON Schemas (draft 2020-12) — task,
// event, decision, config — embedded in the binary, so every boundary
// validates against the same documents that ship in the repository.
//
// Bytes returns a schema's text and Compile compiles it (CompileBytes
// compiles any other schema, such as a tool's arguments, the same way);
// Errors turns a failed validation into field-level errors, the form
// loopgate shows to operators and, for decisions and tool arguments, to the
// model.
package schemas

import (
	"embed"
	"fmt"
	"strings"

	"github.com/kaptinlin/jsonschema"
)

//go:embed *.schema.json
var files embed.FS

// suffix ends every schema file's name.
const suffix = ".schema.json"

// Bytes returns the text of the named schema: its file name
// ("task.schema.json") or the short form ("task"). An unknown name is an
// error wrapping fs.ErrNotExist.
func Bytes(name string) ([]byte, error) {
	if !strings.HasSuffix(name, suffix) {
		name += suffix
	}
	b, err := files.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	return b, nil
}

// Compile compiles the named schema (see Bytes for names) with
// CompileBytes. Each call compiles afresh; callers that validate often
// should keep the result.
func Compile(name string) (*jsonschema.Schema, error) {
	b, err := Bytes(name)
	if err != nil {
		return nil, err
	}
	s, err := CompileBytes(b)
	if err != nil {
		return nil, fmt.Errorf("schema %s: %w", name, err)
	}
	return s, nil
}

// CompileBytes compiles a JSON Schema document, such as a tool's argument
// schema, with a compiler of its own that has no network loaders: a $ref
// to a URL is not fetched.
//
// The result may be validated from several goroutines at once unless the
// schema uses patternProperties. The library compiles each "pattern"
// regexp on first use, which races when that first use is concurrent;
// CompileBytes compiles them all before returning. It rebuilds a
// patternProperties schema's regexp cache on every validation, which no
// preparation avoids: serialise validation with such a schema.
func CompileBytes(b []byte) (*jsonschema.Schema, error) {
	c := jsonschema.NewCompiler()
	delete(c.Loaders, "http")
	delete(c.Loaders, "https")
	s, err := c.Compile(b)
	if err != nil {
		return nil, fmt.Errorf("compile: %w", err)
	}
	warmPatterns(s, map[*jsonschema.Schema]bool{})
	return s, nil
}

// warmPatterns evaluates a string against every subschema that has a
// pattern, which makes the library compile and cache its regexp now rather
// than during a concurrent validation.
func warmPatterns(s *jsonschema.Schema, seen map[*jsonschema.Schema]bool) {
	if s == nil || seen[s] {
		return
	}
	seen[s] = true
	if s.Pattern != nil {
		s.ValidateStruct("")
	}
	for _, m := range []map[string]*jsonschema.Schema{s.Defs, s.DependentSchemas} {
		for _, sub := range m {
			warmPatterns(sub, seen)
		}
	}
	for _, m := range []*jsonschema.SchemaMap{s.Properties, s.PatternProperties} {
		if m != nil {
			for _, sub := range *m {
				warmPatterns(sub, seen)
			}
		}
	}
	for _, list := range [][]*jsonschema.Schema{s.AllOf, s.AnyOf, s.OneOf, s.PrefixItems} {
		for _, sub := range list {
			warmPatterns(sub, seen)
		}
	}
	for _, sub := range []*jsonschema.Schema{
		s.AdditionalProperties, s.UnevaluatedProperties, s.UnevaluatedItems, s.PropertyNames,
		s.ContentSchema, s.Items, s.Contains, s.Not, s.If, s.Then, s.Else,
		s.ResolvedRef, s.ResolvedDynamicRef,
	} {
		warmPatterns(sub, seen)
	}
}
