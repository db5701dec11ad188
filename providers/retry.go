package providers

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/loopgate/loopgate/internal/wait"
)

// Retry defaults.
const (
	DefaultMaxRetries     = 2
	DefaultBaseDelay      = 500 * time.Millisecond
	DefaultMaxDelay       = 8 * time.Second
	DefaultMaxRetryAfter  = 30 * time.Second
	DefaultRequestTimeout = 2 * time.Minute
)

// NoRetries, as Retry.MaxRetries, makes one attempt only.
const NoRetries = -1

// Retry is the policy of the HTTP providers for a request that failed in a
// way a later attempt may not: a 408, 429 or 5xx status, or no whole answer
// (a lost connection, before or while the body is read; an attempt past its
// timeout). Every other failure, a body that arrived whole and does not
// decode included, is returned at once. It is a value; the zero value is the default policy.
type Retry struct {
	// MaxRetries bounds the attempts after the first. Defaults to
	// DefaultMaxRetries (2); NoRetries for none.
	MaxRetries int
	// RequestTimeout bounds one attempt, its response body included.
	// Defaults to DefaultRequestTimeout (2m).
	RequestTimeout time.Duration
	// BaseDelay is the backoff before the first retry; it doubles for each
	// retry after, up to MaxDelay, and a random part of its upper half is
	// left out (jitter) so that many workers do not retry in step.
	// Defaults to 500ms.
	BaseDelay time.Duration
	// MaxDelay caps the backoff. Defaults to 8s.
	MaxDelay time.Duration
	// MaxRetryAfter is the longest wait a server may ask for with
	// Retry-After (seconds or an HTTP date) or retry-after-ms; asked to
	// wait longer, the provider gives up at once and returns the error, as
	// it does when the wait would pass ctx's deadline. Defaults to 30s.
	MaxRetryAfter time.Duration
	// Now is the clock Retry-After dates are read against. Defaults to
	// time.Now.
	Now func() time.Time
	// Sleep waits d or until ctx is done. Defaults to a timer.
	Sleep func(ctx context.Context, d time.Duration) error
}

func (r Retry) withDefaults() Retry {
	if r.MaxRetries == 0 {
		r.MaxRetries = DefaultMaxRetries
	}
	if r.RequestTimeout <= 0 {
		r.RequestTimeout = DefaultRequestTimeout
	}
	if r.BaseDelay <= 0 {
		r.BaseDelay = DefaultBaseDelay
	}
	if r.MaxDelay <= 0 {
		r.MaxDelay = DefaultMaxDelay
	}
	if r.MaxRetryAfter <= 0 {
		r.MaxRetryAfter = DefaultMaxRetryAfter
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	if r.Sleep == nil {
		r.Sleep = wait.For
	}
	return r
}

// retries is how many retries the policy allows.
func (r Retry) retries() int { return max(r.MaxRetries, 0) }

// backoff is the wait before retry n (0 for the first).
func (r Retry) backoff(n int) time.Duration {
	d := r.MaxDelay
	if n < 30 {
		d = min(r.BaseDelay<<n, r.MaxDelay)
	}
	if half := d / 2; half > 0 {
		d -= rand.N(half)
	}
	return d
}

// retryAfter reads how long the server asked to wait: retry-after-ms
// (OpenAI's), then Retry-After in seconds or as an HTTP date. ok is false
// when it did not ask, or asked in a form that does not parse.
func (r Retry) retryAfter(h http.Header) (d time.Duration, ok bool) {
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms >= 0 {
			return time.Duration(min(ms, 1e10) * float64(time.Millisecond)), true
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil {
		if s < 0 || s != s {
			return 0, false
		}
		return time.Duration(min(s, 1e7) * float64(time.Second)), true // 1e7s: past any cap, short of overflow
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(r.Now()), 0), true
	}
	return 0, false
}

// failure is what a provider makes of one failed attempt.
type failure struct {
	// err is the attempt's error as the caller will see it.
	err error
	// retryable: a later attempt may succeed.
	retryable bool
	// header is the response's, when there was one.
	header http.Header
}

// do runs attempt with each attempt's own timeout until it succeeds, fails
// for good, or the policy gives up. classify turns an attempt's error into
// a failure. When ctx is done do returns ctx's error, wrapped; an attempt
// that timed out on its own is not reported as ctx's deadline.
func (r Retry) do(ctx context.Context, log *slog.Logger, what string, attempt func(ctx context.Context) error, classify func(error) failure) error {
	r = r.withDefaults()
	for n := 0; ; n++ {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
		actx, cancel := context.WithTimeout(ctx, r.RequestTimeout)
		err := attempt(actx)
		timedOut := errors.Is(actx.Err(), context.DeadlineExceeded)
		cancel()
		if err == nil {
			return nil
		}
		if cerr := ctx.Err(); cerr != nil {
			return fmt.Errorf("%s: %w", what, cerr)
		}
		f := classify(err)
		if timedOut {
			f = failure{err: fmt.Errorf("no answer within the request timeout of %s", r.RequestTimeout), retryable: true}
		}
		tries := fmt.Sprintf("attempt %d of %d", n+1, r.retries()+1)
		if !f.retryable || n >= r.retries() {
			if n == 0 && !f.retryable {
				return fmt.Errorf("%s: %w", what, f.err)
			}
			return fmt.Errorf("%s: %s: %w", what, tries, f.err)
		}
		wait, asked := r.retryAfter(f.header)
		switch {
		case asked && wait > r.MaxRetryAfter:
			return fmt.Errorf("%s: %s: %w (the server asks to retry after %s, more than the %s loopgate waits)", what, tries, f.err, wait.Round(time.Second), r.MaxRetryAfter)
		case !asked:
			wait = r.backoff(n)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return fmt.Errorf("%s: %s: %w (a retry after %s would pass the run's deadline)", what, tries, f.err, wait.Round(time.Millisecond))
		}
		log.WarnContext(ctx, "model request failed; retrying", "request", what, "attempt", n+1, "max_attempts", r.retries()+1, "wait", wait, "retry_after", asked, "err", f.err)
		if err := r.Sleep(ctx, wait); err != nil {
			return fmt.Errorf("%s: %w", what, err)
		}
	}
}

// retryableStatus reports whether a response status is worth another try.
func retryableStatus(status int, h http.Header) bool {
	// OpenAI and Anthropic say so themselves when they know better.
	switch h.Get("X-Should-Retry") {
	case "true":
		return true
	case "false":
		return false
	}
	return status == http.StatusRequestTimeout || status == http.StatusTooManyRequests || status >= 500
}

// transportFailure classifies an error that came with no HTTP status to
// judge by: a request that got no answer, or only part of one (the
// connection dropped while the body was read: a proxy or load balancer
// cutting a slow answer), is worth another attempt; a body that arrived
// whole and does not decode is not.
func transportFailure(err error) failure {
	var (
		uerr *url.Error
		berr *bodyError
	)
	return failure{err: err, retryable: errors.As(err, &uerr) || errors.As(err, &berr)}
}

// bodyError is an error reading a response body. It marks the failure as
// the transport's: both SDKs decode the body with a json.Decoder, which
// reports a body that arrived whole but cut short as io.ErrUnexpectedEOF
// too, so the error alone cannot tell a lost connection from a bad answer.
type bodyError struct{ err error }

func (e *bodyError) Error() string { return e.err.Error() }
func (e *bodyError) Unwrap() error { return e.err }

// markBodyErrors is an SDK middleware (option.Middleware of either SDK)
// that wraps each response body so that an error reading it is a
// *bodyError.
func markBodyErrors(req *http.Request, next func(*http.Request) (*http.Response, error)) (*http.Response, error) {
	res, err := next(req)
	if res != nil && res.Body != nil {
		res.Body = markedBody{res.Body}
	}
	return res, err
}

type markedBody struct{ io.ReadCloser }

func (b markedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF { // io.EOF is the end of a whole body, and must stay itself for io.ReadAll
		err = &bodyError{err}
	}
	return n, err
}
