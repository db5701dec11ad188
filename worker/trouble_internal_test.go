package worker

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

func TestTroubleLogWarnsAtTheStartThenNowAndThenAndSaysWhenItIsOver(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	now := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	tl := newTroubleLog("fetch work", log, func() time.Time { return now })
	ctx := context.Background()
	lost := errors.New("no heartbeat")
	tl.ok(ctx) // no trouble: nothing to say
	for range 3 {
		tl.failed(ctx, lost) // three workers at once
	}
	now = now.Add(troubleEvery - time.Millisecond)
	tl.failed(ctx, lost)
	now = now.Add(time.Millisecond)
	tl.failed(ctx, lost)
	now = now.Add(time.Second)
	tl.ok(ctx)
	tl.ok(ctx)
	tl.failed(ctx, lost) // a trouble of its own
	want := []string{
		`level=WARN msg="fetch work" err="no heartbeat"`,
		`level=WARN msg="fetch work" err="no heartbeat" failures=4 since=10s`,
		`level=INFO msg="fetch work: working again" failures=5 after=11s`,
		`level=WARN msg="fetch work" err="no heartbeat"`,
	}
	if got := strings.Split(strings.TrimSpace(out.String()), "\n"); strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("logged\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
