package tools

import (
	"encoding/json"

	"github.com/loopgate/loopgate/events"
)

// Permission says whether a tool only observes the world or changes it.
type Permission string

// Permissions.
const (
	Read  Permission = "read"
	Write Permission = "write"
)

// Manifest describes one tool, as written in the config. The schema the
// model is shown and the schema calls are validated against both come from
// here: one source of truth.
type Manifest struct {
	// Name is what the model calls the tool. Required.
	Name string `json:"name"`
	// Version of the tool's contract. Defaults to "1".
	Version string `json:"version,omitempty"`
	// Description tells the model when to use the tool. Required.
	Description string `json:"description"`
	// Permission is read or write. Required.
	Permission Permission `json:"permission"`
	// ArgsSchema is the JSON Schema of the arguments; the config loader
	// resolves a file path to its content. additionalProperties:false is
	// enforced at registration. Required.
	ArgsSchema json.RawMessage `json:"args_schema"`
	// View shapes results into observations. Defaults to the whole result.
	View View `json:"view,omitzero"`
	// Timeout bounds one call. Defaults to 10s.
	Timeout events.Duration `json:"timeout,omitempty"`
	// MaxCallsPerRun bounds the tool's calls in one run. Defaults to 0: only
	// the run's total bound applies.
	MaxCallsPerRun int `json:"max_calls_per_run,omitempty"`
	// ParallelSafe lets calls of this (read-only) tool run concurrently.
	ParallelSafe bool `json:"parallel_safe,omitempty"`
	// Builtin names the Go implementation. Defaults to Name.
	Builtin string `json:"builtin,omitempty"`
}

// View is a designed, compact projection of a tool's result.
type View struct {
	// Fields keeps only these keys of an object result, or of each object
	// item of an array result. Defaults to all keys.
	Fields []string `json:"fields,omitempty"`
	// MaxItems keeps at most this many items of an array result and says
	// how many there were. Defaults to 0: no item bound beyond the byte bound.
	MaxItems int `json:"max_items,omitempty"`
}
