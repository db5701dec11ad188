package toolsvc

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/loopgate/loopgate/tools"
)

// Error is an error reply: Code goes in Nats-Service-Error-Code and
// Description in Nats-Service-Error. loopgate classifies 429 and 503 as
// transient (retried once), 504 as an unknown outcome (a timeout: a write
// is reconciled or asked to a human, never re-run blindly), everything
// else as a tool failure; the description reaches loopgate's operator
// log, never the model.
type Error struct {
	// Code is an HTTP-like status: 400, 429, 500, 503…
	Code int
	// Description says what went wrong; it leaves this process.
	Description string
	// Err is the cause, for this process's log and errors.Is.
	Err error
}

func (e *Error) Error() string {
	if e.Err != nil {
		return fmt.Sprintf("%d %s: %v", e.Code, e.Description, e.Err)
	}
	return fmt.Sprintf("%d %s", e.Code, e.Description)
}

func (e *Error) Unwrap() error { return e.Err }

// Transient says the call had no effect and a retry may succeed (an
// upstream that is down, a lock held elsewhere): a 503 reply, which
// loopgate classifies as transient. Never use it for a write that may have
// happened.
func Transient(err error) error {
	return &Error{Code: http.StatusServiceUnavailable, Description: "unavailable: " + msg(err), Err: err}
}

// BadRequest says the tool refuses the arguments: a 400 reply. loopgate
// validated them against the manifest's schema, so it means the manifest
// and the service disagree; loopgate quarantines the tool for the run.
func BadRequest(err error) error {
	return &Error{Code: http.StatusBadRequest, Description: "bad request: " + msg(err), Err: err}
}

func msg(err error) string {
	if err == nil {
		return "no detail"
	}
	return err.Error()
}

// replyError maps a handler's error to the reply's code and description.
// (A call whose own context has ended gets no reply at all; see serve.)
//
// It runs the error's own methods (Unwrap, As, Is, Error), the handler's
// code: a panic in them is a 500, as the handler's own is, not the end of
// the process.
func replyError(err error) (code int, description string) {
	defer func() {
		if recover() != nil {
			code, description = http.StatusInternalServerError, "internal error"
		}
	}()
	var e *Error
	if errors.As(err, &e) {
		if e == nil {
			// A typed nil (var e *Error; …; return v, e): a non-nil
			// error that says nothing, a handler's bug.
			return http.StatusInternalServerError, "internal error"
		}
		return e.Code, e.Description
	}
	switch {
	case errors.Is(err, tools.ErrTransient):
		return http.StatusServiceUnavailable, "unavailable: " + err.Error()
	case errors.Is(err, context.DeadlineExceeded):
		// Some deadline of the handler's own (an upstream's) passed: it
		// may or may not have taken effect.
		return http.StatusGatewayTimeout, "upstream deadline exceeded"
	}
	return http.StatusInternalServerError, "internal error"
}
