package providers

import (
	"net/http"
	"testing"
	"time"
)

func TestRetryAfter(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	r := Retry{Now: func() time.Time { return now }}.withDefaults()
	tests := []struct {
		name   string
		given  map[string]string
		want   time.Duration
		wantOK bool
	}{
		{name: "none", given: nil},
		{name: "seconds", given: map[string]string{"Retry-After": "3"}, want: 3 * time.Second, wantOK: true},
		{name: "fractional seconds", given: map[string]string{"Retry-After": "1.5"}, want: 1500 * time.Millisecond, wantOK: true},
		{name: "zero", given: map[string]string{"Retry-After": "0"}, want: 0, wantOK: true},
		{name: "an HTTP date", given: map[string]string{"Retry-After": now.Add(90 * time.Second).Format(http.TimeFormat)}, want: 90 * time.Second, wantOK: true},
		{name: "an RFC 850 date", given: map[string]string{"Retry-After": now.Add(10 * time.Second).Format(time.RFC850)}, want: 10 * time.Second, wantOK: true},
		{name: "a date in the past", given: map[string]string{"Retry-After": now.Add(-time.Hour).Format(http.TimeFormat)}, want: 0, wantOK: true},
		{name: "milliseconds win", given: map[string]string{"Retry-After-Ms": "250", "Retry-After": "9"}, want: 250 * time.Millisecond, wantOK: true},
		{name: "unreadable milliseconds fall back to seconds", given: map[string]string{"Retry-After-Ms": "x", "Retry-After": "9"}, want: 9 * time.Second, wantOK: true},
		{name: "negative", given: map[string]string{"Retry-After": "-5"}},
		{name: "garbage", given: map[string]string{"Retry-After": "later"}},
		{name: "huge does not overflow", given: map[string]string{"Retry-After": "1e300"}, want: 1e7 * time.Second, wantOK: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			h := http.Header{}
			for k, v := range tt.given {
				h.Set(k, v)
			}
			got, ok := r.retryAfter(h)
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("retryAfter(%v) = %v, %v; want %v, %v", tt.given, got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestBackoffDoublesWithinItsCap(t *testing.T) {
	t.Parallel()
	r := Retry{}.withDefaults()
	for n, top := range []time.Duration{500 * time.Millisecond, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second} {
		for range 50 {
			if d := r.backoff(n); d <= top/2 || d > top {
				t.Fatalf("backoff(%d) = %v, want within (%v, %v]", n, d, top/2, top)
			}
		}
	}
	if d := r.backoff(200); d > r.MaxDelay {
		t.Errorf("backoff(200) = %v, over the cap", d)
	}
}

func TestRetryDefaults(t *testing.T) {
	t.Parallel()
	if r := (Retry{}).withDefaults(); r.MaxRetries != 2 || r.RequestTimeout != 2*time.Minute || r.MaxRetryAfter != 30*time.Second {
		t.Errorf("defaults = %+v", r)
	}
	if r := (Retry{MaxRetries: NoRetries}).withDefaults().withDefaults(); r.retries() != 0 {
		t.Errorf("NoRetries gives %d retries", r.retries())
	}
}

func TestRetryableStatus(t *testing.T) {
	t.Parallel()
	for status, want := range map[int]bool{400: false, 401: false, 403: false, 404: false, 408: true, 409: false, 422: false, 429: true, 500: true, 502: true, 503: true, 504: true, 529: true} {
		if got := retryableStatus(status, http.Header{}); got != want {
			t.Errorf("retryableStatus(%d) = %v, want %v", status, got, want)
		}
	}
	if retryableStatus(503, http.Header{"X-Should-Retry": {"false"}}) || !retryableStatus(400, http.Header{"X-Should-Retry": {"true"}}) {
		t.Error("X-Should-Retry is not honoured")
	}
}

func TestMask(t *testing.T) {
	t.Parallel()
	for given, want := range map[string]string{
		"Incorrect API key provided: sk-proj-********abcd.": "Incorrect API key provided: [redacted].",
		"key sk-ant-api03-xyzXYZ_-123 is invalid":           "key [redacted] is invalid",
		"the secret MYSECRETVALUE leaked":                   "the secret [redacted] leaked",
		"nothing to hide":                                   "nothing to hide",
	} {
		if got := mask(given, "MYSECRETVALUE"); got != want {
			t.Errorf("mask(%q) = %q, want %q", given, got, want)
		}
	}
}
