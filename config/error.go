package config

import (
	"errors"
	"strings"

	"github.com/loopgate/loopgate/events"
)

// ErrInvalid is matched (errors.Is) by every error Load and LoadFile return
// for a file that was read but not accepted. The error is an *Error.
var ErrInvalid = errors.New("invalid config")

// Error is a config file that was read but not accepted. Errors names each
// bad field by its JSON pointer in the file ("/agents/triage/limits/max_steps");
// "" is the file as a whole.
type Error struct {
	// File is the config's path as the caller gave it.
	File string
	// Errors lists the problems found, sorted by field.
	Errors []events.FieldError
}

// Error reads "config loopgate.yaml: /agents/x/limits/max_steps: must be
// >= 1", problems separated by "; ".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString("config ")
	b.WriteString(e.File)
	for i, fe := range e.Errors {
		if i == 0 {
			b.WriteString(": ")
		} else {
			b.WriteString("; ")
		}
		if fe.Field != "" {
			b.WriteString(fe.Field)
			b.WriteString(": ")
		}
		b.WriteString(fe.Message)
	}
	return b.String()
}

// Is reports whether target is ErrInvalid.
func (e *Error) Is(target error) bool { return target == ErrInvalid }
