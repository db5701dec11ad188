package providers

import (
	"fmt"
	"net/http"
	"regexp"
	"strings"
)

// ProviderError is an HTTP provider's refusal of a request: the status and
// what the error body said. Its message has the API key, and anything that
// looks like one, masked.
type ProviderError struct {
	// Provider is "openai" or "anthropic".
	Provider string
	// StatusCode is the HTTP status.
	StatusCode int
	// Type is the error body's type: invalid_request_error,
	// rate_limit_error, overloaded_error…
	Type string
	// Code is the error body's code, when it has one (OpenAI's
	// model_not_found, Anthropic's error_code).
	Code string
	// Message is the error body's message, bounded.
	Message string
	// RequestID is the provider's id of the request, for its support.
	RequestID string
}

func (e *ProviderError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "HTTP %d", e.StatusCode)
	if t := http.StatusText(e.StatusCode); t != "" {
		b.WriteString(" " + t)
	}
	for _, s := range []string{e.Type, e.Code, e.Message} {
		if s != "" {
			b.WriteString(": " + s)
		}
	}
	if e.RequestID != "" {
		b.WriteString(" (request " + e.RequestID + ")")
	}
	return b.String()
}

// maxErrorMessage bounds the provider's message kept in an error: it ends
// up in the run's finished event.
const maxErrorMessage = 512

// keyLike matches API keys as providers echo them ("Incorrect API key
// provided: sk-proj-****abcd"), masked or not.
var keyLike = regexp.MustCompile(`\b(sk|sk-ant|sk-proj)-[A-Za-z0-9_\-*]{4,}`)

// mask removes secret, and anything that looks like an API key, from s.
func mask(s, secret string) string {
	if secret != "" {
		s = strings.ReplaceAll(s, secret, "[redacted]")
	}
	return keyLike.ReplaceAllString(s, "[redacted]")
}

// masked wraps an error whose text might hold a secret: Error masks it,
// errors.Is and As still see the original.
type masked struct {
	err    error
	secret string
}

func (e *masked) Error() string { return mask(e.err.Error(), e.secret) }
func (e *masked) Unwrap() error { return e.err }

func maskErr(err error, secret string) error {
	if err == nil {
		return nil
	}
	return &masked{err: err, secret: secret}
}

func bound(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
