package cli

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
)

// TestSubmitToAFullStoreSaysNothingWasStored: when JetStream has no room,
// loopgate submit fails with JetStream's own error and says what it means
// for the operator: nothing was stored, and sending the same task again
// is safe. The work stream is left as it was.
func TestSubmitToAFullStoreSaysNothingWasStored(t *testing.T) {
	t.Parallel()
	env := natstest.StartWith(t, natstest.Options{MaxFileStore: 8 << 20})
	fillToTheBrim(t, env.JS)
	var out, errOut bytes.Buffer
	code := Main(t.Context(), []string{"submit", "--nats", env.Server.ClientURL(), "--task-id", "full-1"}, nil, &out, &errOut)
	if code != exitError {
		t.Fatalf("exit %d, want %d:\n%s\n%s", code, exitError, out.String(), errOut.String())
	}
	for _, want := range []string{"publish task:", "err_code=10023", "nothing was stored", "submit the same task again"} {
		if !strings.Contains(errOut.String(), want) {
			t.Errorf("stderr lacks %q:\n%s", want, errOut.String())
		}
	}
	st, err := env.JS.Stream(t.Context(), journal.StreamWork)
	if err != nil {
		t.Fatal(err)
	}
	if n := st.CachedInfo().State.Msgs; n != 0 {
		t.Errorf("the work stream holds %d messages, want 0", n)
	}
}

// TestNotStoredExplainsOnlyOutages: a refusal that depends on the message
// (here a duplicate-conflict) keeps JetStream's error as it is.
func TestNotStoredExplainsOnlyOutages(t *testing.T) {
	t.Parallel()
	full := &jetstream.APIError{Code: 503, ErrorCode: 10023, Description: "insufficient resources"}
	if got := notStored(full, "retry").Error(); !strings.Contains(got, "nothing was stored") || !errors.Is(notStored(full, "retry"), full) {
		t.Errorf("full store: %q, want the explanation, wrapping the API error", got)
	}
	other := &jetstream.APIError{Code: 400, ErrorCode: 10071, Description: "wrong last sequence"}
	if got := notStored(other, "retry"); got != error(other) {
		t.Errorf("a conflict: %v, want the API error unchanged", got)
	}
}

// fillToTheBrim publishes 256 KiB chunks to a stream of its own until the
// server refuses one for want of room.
func fillToTheBrim(t *testing.T, js jetstream.JetStream) {
	t.Helper()
	ctx := t.Context()
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: "FILLER", Subjects: []string{"filler"}, Storage: jetstream.FileStorage}); err != nil {
		t.Fatal(err)
	}
	chunk := bytes.Repeat([]byte("x"), 256<<10)
	for range 1000 {
		_, err := js.Publish(ctx, "filler", chunk)
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && apiErr.ErrorCode == 10023 {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	t.Fatal("the store never filled up")
}
