package worker_test

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
)

// Pin: a signature is a signature over what was sent. encoding/json would
// replace invalid UTF-8 (a raw byte, a lone surrogate escape) with U+FFFD
// before approvals.SigningPayload's UTF-8 guard could see it, so a message
// carrying 0xff would verify against a signature over U+FFFD; what refuses
// it is only the approval schema's decoder (strict UTF-8). Keep it so.
func TestASignedApprovalWithInvalidUTF8IsRefusedAsInvalid(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, id string
		bad      []byte
	}{
		{"raw byte 0xff", "utf8-raw", []byte{0xff}},
		{"lone surrogate escape", "utf8-esc", []byte(`\ud800`)},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			o := oneDraft(t, "drafted")
			o.configFile = exampleConfigFile // requires signatures
			b := setup(t, o)
			runID, q := draftRun(t, b, c.id)
			m := signedApproval(t, runID, "s1c1", q, "supervisor@cityops", nil, time.Now())
			m.Reason = "ok \uFFFD"
			if err := approvals.Sign(&m, exampleKey(t, "supervisor@cityops"), time.Now()); err != nil {
				t.Fatal(err)
			}
			payload, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			sent := bytes.Replace(payload, []byte("\uFFFD"), c.bad, 1)
			if bytes.Equal(sent, payload) {
				t.Fatal("the replacement character is not in the payload")
			}
			ack, err := b.env.JS.Publish(t.Context(), events.ApprovalSubject("cityops", runID, "s1c1"), sent)
			if err != nil {
				t.Fatal(err)
			}
			if class, detail := b.outcomeOf(runID, ack.Sequence); class != approvals.RejectInvalid {
				t.Fatalf("reason %q signed as U+FFFD: %s (%s), want %s", c.bad, class, detail, approvals.RejectInvalid)
			}
		})
	}
}

// The message is authenticated before anything it claims is judged
// (approvals.Check's doc, README "Signed approvals": no signature →
// unsigned, one that does not verify → bad_signature; only a verified
// signature can be stale, or "a copy of a handled message"). The worker's
// copy check (handledSignature) runs before Check, and used to run on the
// bare signature string: a forgery that lifts the signature of a message
// already handled and changes what it says (here: fixes up the args hash
// the original got wrong) was recorded as stale_signature, "a copy of
// approval message N, handled already" — an audit that read as a harmless
// replay of a real approver's message, when the message was never signed
// by anyone. Now only a signature that verifies makes a copy.
func TestAForgedMessageWithALiftedSignatureIsBadSignatureNotACopy(t *testing.T) {
	t.Parallel()
	o := oneDraft(t, "drafted")
	o.configFile = exampleConfigFile // requires signatures
	b := setup(t, o)
	runID, q := draftRun(t, b, "lifted-1")
	supervisor := exampleKey(t, "supervisor@cityops")

	// A genuine signed approval bound to another hash: handled, rejected.
	wrong := signedApproval(t, runID, "s1c1", events.ApprovalRequestedData{ArgsHash: "sha256:" + strings.Repeat("1", 64)}, "supervisor@cityops", supervisor, time.Now())
	first := b.publishMessage(wrong, runID, "s1c1")
	if class, detail := b.outcomeOf(runID, first); class != approvals.RejectHashMismatch {
		t.Fatalf("the genuine message: %s (%s), want %s", class, detail, approvals.RejectHashMismatch)
	}

	// The forgery: the same signature, the pending question's hash.
	forged := wrong
	forged.ArgsHash = q.ArgsHash
	pub, err := supervisor.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	if err := approvals.VerifySignature(forged, pub); err == nil {
		t.Fatal("the forged message verifies: the test is wrong")
	}
	seq := b.publishMessage(forged, runID, "s1c1")
	if class, detail := b.outcomeOf(runID, seq); class != approvals.RejectBadSignature {
		t.Fatalf("a message whose signature does not verify: %s (%s), want %s", class, detail, approvals.RejectBadSignature)
	}
	if e := pendingEntry(t, b, runID, "s1c1"); !e.Pending() {
		t.Fatalf("entry = %+v, want still pending", e)
	}
}
