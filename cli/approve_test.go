package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/internal/natstest"
)

// approveWhenParked answers every call run runID parks on with
// `loopgate approve RUN CALL --as as --key examples/cityops/keys/<as>.nk
// --yes`, until stop is called.
func approveWhenParked(t *testing.T, url, runID, as string) (stop func()) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *nats.Msg, 16)
	sub, err := nc.ChanSubscribe("loopgate.events.cityops."+runID+".parked", ch)
	if err != nil {
		t.Fatal(err)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		for {
			select {
			case m := <-ch:
				var ev events.Event
				var d events.ParkedData
				if json.Unmarshal(m.Data, &ev) != nil || ev.Decode(&d) != nil {
					t.Errorf("parked event does not decode: %s", m.Data)
					continue
				}
				for _, call := range d.Awaiting {
					var out, errOut bytes.Buffer
					code := Main(t.Context(), []string{"approve", runID, call, "--as", as, "--key", exampleKeys + as + ".nk", "--yes", "--nats", url, "--wait", "30s"}, nil, &out, &errOut)
					if code != exitOK {
						t.Errorf("approve %s: exit %d\n%s\n%s", call, code, out.String(), errOut.String())
					}
				}
			case <-quit:
				return
			}
		}
	}()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(quit)
			<-finished
			_ = sub.Unsubscribe()
			nc.Close()
		})
	}
	t.Cleanup(stop)
	return stop
}

// parkedRun starts a happy-path task for dev@cityops from a plain client
// and returns its run id once the run has parked on its first draft, s3c1.
func parkedRun(t *testing.T, srv *server, taskID string) string {
	t.Helper()
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	runID := events.RunID("cityops", taskID)
	ch := make(chan *nats.Msg, 4)
	sub, err := nc.ChanSubscribe("loopgate.events.cityops."+runID+".parked", ch)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	publishTask(t, nc, plainTask(taskID, "escalation-assistant"), taskID)
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("run %s did not park", runID)
	}
	return runID
}

// run runs the command line with stdin and returns its exit code and output.
func run(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Main(t.Context(), args, strings.NewReader(stdin), &out, &errOut)
	return code, out.String(), errOut.String()
}

func drafts(t *testing.T, dataDir string) []string {
	t.Helper()
	entries, err := os.ReadDir(filepath.Join(dataDir, "outbox"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

const firstDraftArgs = `{"reason":"Open 9 days, past the 5-day sanitation escalation threshold.","request_id":"SR-10421"}`

func TestPendingShowsAParkedCallWithItsExactAction(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	runID := parkedRun(t, srv, "pending-1")

	code, out, errOut := run(t, "", "pending", "--nats", srv.url)
	if code != exitOK {
		t.Fatalf("pending exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		"1 pending (any tenant)",
		"run        " + runID + " (tenant cityops)",
		"call       s3c1 (step 3), approval, round 1",
		"tool       draft_escalation",
		"args       " + firstDraftArgs,
		"args_hash  sha256:",
		"principal  dev@cityops",
		"why        draft_escalation is a write tool: a human must approve these exact arguments",
		"expires    in ", // approval_ttl: 1h
		"loopgate approve " + runID + " s3c1 --as <approver> --key FILE --nats " + srv.url + "   " + keyNote + decideHintDeny,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("pending output lacks %q:\n%s", want, out)
		}
	}

	code, out, errOut = run(t, "", "pending", "--nats", srv.url, "--json", "--tenant", "cityops")
	if code != exitOK {
		t.Fatalf("pending --json exit %d: %s", code, errOut)
	}
	var got struct {
		approvals.Entry
		Args json.RawMessage `json:"args"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("pending --json is not one JSON entry: %v\n%s", err, out)
	}
	if got.RunID != runID || got.CallID != "s3c1" || got.State != approvals.StatePending || string(got.Args) != firstDraftArgs || !strings.HasPrefix(got.ArgsHash, "sha256:") {
		t.Errorf("pending --json entry: %+v args %s", got.Entry, got.Args)
	}

	code, out, _ = run(t, "", "pending", "--nats", srv.url, "--tenant", "elsewhere")
	if code != exitOK || !strings.Contains(out, "nothing pending (tenant elsewhere)") {
		t.Errorf("pending of another tenant: exit %d\n%s", code, out)
	}
}

func TestApproveByAnApproverThePolicyRefusesIsRejectedAndTheRunStaysParked(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startServe(t, data)
	runID := parkedRun(t, srv, "refused-1")
	// A key of nobody's: the example has none for nobody@cityops.
	strangerKey := filepath.Join(t.TempDir(), "nobody.nk")
	if code, _, errOut := run(t, "", "keys", "new", "--out", strangerKey); code != exitOK {
		t.Fatalf("keys new: %s", errOut)
	}
	// Each signs with their own key, so the signature verifies and what
	// is judged is who they are. The example requires signatures, and
	// Check authenticates a message before it looks at its approver: an
	// approver missing from the policy has no key to verify against, so
	// nobody@cityops is refused as bad_signature, never as
	// unknown_approver (the worker tests cover that class with signatures
	// off).
	cases := []struct {
		as, key, class, detail string
	}{
		{"intern@cityops", exampleKeys + "intern@cityops.nk", approvals.RejectNotAllowed, "intern@cityops's roles may not approve draft_escalation"},
		{"dev@cityops", exampleKeys + "dev@cityops.nk", approvals.RejectSelf, "dev@cityops asked for this run and may not approve it"}, // his own run
		{"nobody@cityops", strangerKey, approvals.RejectBadSignature, "nobody@cityops is not an approver in the policy: no key to verify the signature against"},
	}
	for _, c := range cases {
		code, out, errOut := run(t, "", "approve", runID, "s3c1", "--as", c.as, "--key", c.key, "--yes", "--nats", srv.url, "--wait", "30s")
		if code != exitApprovalRejected {
			t.Errorf("approve --as %s: exit %d, want %d\n%s\n%s", c.as, code, exitApprovalRejected, out, errOut)
		}
		// The exact action was shown before anything was sent.
		if i, j := strings.Index(out, "args       "+firstDraftArgs), strings.Index(out, "sent approve on loopgate.approvals.cityops."+runID+".s3c1"); i < 0 || j < i {
			t.Errorf("approve --as %s did not show the action before sending:\n%s", c.as, out)
		}
		if !strings.Contains(out, "REJECTED ("+c.class+"): "+c.detail) || !strings.Contains(errOut, c.class) {
			t.Errorf("approve --as %s does not report %s:\n%s\n%s", c.as, c.class, out, errOut)
		}
	}
	// Nothing was decided: the call is still pending and nothing was written.
	if _, out, _ := run(t, "", "pending", "--nats", srv.url); !strings.Contains(out, "call       s3c1") {
		t.Errorf("after rejections the call is not pending:\n%s", out)
	}
	if d := drafts(t, data); len(d) != 0 {
		t.Errorf("drafts written after rejected approvals: %v", d)
	}
}

func TestApproveResumesTheRunAndTheDraftIsWrittenOnce(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startServe(t, data)
	runID := parkedRun(t, srv, "approve-1")

	const key = exampleKeys + "supervisor@cityops.nk"
	// Without --yes it asks; anything but y sends nothing.
	code, out, _ := run(t, "n\n", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--key", key, "--nats", srv.url)
	if code != exitError || !strings.Contains(out, "send approve? [y/N] n\nnot sent") {
		t.Fatalf("approve answered n: exit %d\n%s", code, out)
	}

	code, out, errOut := run(t, "y\n", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--key", key, "--reason", "past the threshold", "--nats", srv.url, "--wait", "30s")
	if code != exitOK {
		t.Fatalf("approve exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"accepted: s3c1 approve by supervisor@cityops",
		"APPROVED by supervisor@cityops: past the threshold",
		"executed           s3c1   draft_escalation ok",
		// The run goes on to the next draft and parks again.
		"approval_requested s4c1",
		"waiting for approval: loopgate approve " + runID + " s4c1 --as <approver> --key FILE --nats " + srv.url + "   " + keyNote + "\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("approve output lacks %q:\n%s", want, out)
		}
	}
	if d := drafts(t, data); len(d) != 1 {
		t.Fatalf("after one approval the outbox holds %v, want one draft", d)
	}

	// The same approval again is refused before anything is sent, and an
	// approval message sent anyway (a replay) decides nothing.
	code, _, errOut = run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--key", key, "--yes", "--nats", srv.url)
	if code != exitError || !strings.Contains(errOut, "is not pending: already decided approved by supervisor@cityops") {
		t.Errorf("second approve: exit %d: %s", code, errOut)
	}
	code, _, errOut = run(t, "", "approve", runID, "s9c9", "--as", "supervisor@cityops", "--key", key, "--yes", "--nats", srv.url)
	if code != exitError || !strings.Contains(errOut, "has no approval request") {
		t.Errorf("approve of a call never asked about: exit %d: %s", code, errOut)
	}

	code, out, _ = run(t, "", "audit", runID, "--nats", srv.url, "--json")
	if code != exitOK {
		t.Fatalf("audit exit %d", code)
	}
	executing := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var ev events.Event
		if err := json.Unmarshal([]byte(line), &ev); err != nil {
			t.Fatal(err)
		}
		if ev.Type == events.TypeExecuting && ev.CallID == "s3c1" {
			executing++
		}
	}
	if executing != 1 || len(drafts(t, data)) != 1 {
		t.Errorf("s3c1 was executed %d times, outbox %v; want once, one draft", executing, drafts(t, data))
	}

	// The audit timeline shows the approval and where the time went.
	_, out, _ = run(t, "", "audit", runID, "--nats", srv.url)
	for _, want := range []string{
		"approval_requested s3c1   APPROVAL of draft_escalation",
		"parked                    awaiting s3c1 until",
		"approvals (2 gated calls):",
		"s3c1   draft_escalation   APPROVED by supervisor@cityops after",
		"s4c1   draft_escalation   still pending",
		"parked now, since",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("audit lacks %q:\n%s", want, out)
		}
	}
}

func TestDenyReachesTheModelAsAnObservation(t *testing.T) {
	t.Parallel()
	data := t.TempDir()
	srv := startServe(t, data)
	runID := parkedRun(t, srv, "deny-1")

	const key = exampleKeys + "supervisor@cityops.nk"
	code, _, errOut := run(t, "", "deny", runID, "s3c1", "--as", "supervisor@cityops", "--key", key, "--yes", "--nats", srv.url)
	if code != exitError || !strings.Contains(errOut, "--reason is required") {
		t.Errorf("deny without a reason: exit %d: %s", code, errOut)
	}
	code, out, errOut := run(t, "", "deny", runID, "s3c1", "--as", "supervisor@cityops", "--key", key, "--reason", "SR-10421 is with the crew", "--yes", "--nats", srv.url, "--wait", "30s")
	if code != exitOK {
		t.Fatalf("deny exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"accepted: s3c1 deny by supervisor@cityops",
		"DENIED by supervisor@cityops: SR-10421 is with the crew",
		// The exact observation the model receives, then its next decision.
		`observed           s3c1   {"status":"error","error":"denied","tool":"draft_escalation","message":"DENIED by supervisor@cityops: SR-10421 is with the crew. Propose an alternative."`,
		`step 4    proposed                  draft_escalation{"request_id":"SR-10422"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("deny output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "executing          s3c1") || len(drafts(t, data)) != 0 {
		t.Errorf("a denied draft ran: outbox %v\n%s", drafts(t, data), out)
	}
}

func TestChooseDecisionMatchesTheQuestion(t *testing.T) {
	t.Parallel()
	cases := []struct {
		verb    string
		kind    approvals.Kind
		flag    string
		want    approvals.Decision
		wantErr string
	}{
		{"approve", approvals.KindApproval, "", approvals.Approve, ""},
		{"approve", approvals.KindApproval, "approve", approvals.Approve, ""},
		{"approve", approvals.KindApproval, "retry", "", "does not answer this approval question"},
		{"approve", approvals.KindNeedsHuman, "", "", "--decision mark_done, retry or abandon"},
		{"approve", approvals.KindNeedsHuman, "retry", approvals.Retry, ""},
		{"approve", approvals.KindNeedsHuman, "mark_done", approvals.MarkDone, ""},
		{"approve", approvals.KindNeedsHuman, "approve", "", "want mark_done, retry or abandon"},
		{"deny", approvals.KindApproval, "", approvals.Deny, ""},
		{"deny", approvals.KindNeedsHuman, "", "", "--decision mark_done|retry|abandon"},
	}
	for _, c := range cases {
		got, err := chooseDecision(c.verb, c.kind, &c.flag)
		if got != c.want || (err == nil) != (c.wantErr == "") || (err != nil && !strings.Contains(err.Error(), c.wantErr)) {
			t.Errorf("%s %s --decision %q: got %q, %v; want %q, %q", c.verb, c.kind, c.flag, got, err, c.want, c.wantErr)
		}
	}
}

func TestAuditCountsParkedTimeApartFromActiveTime(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	ev := func(seq int, at time.Duration, typ events.Type, call string, data any) events.Event {
		b, _ := json.Marshal(data)
		return events.Event{Seq: uint64(seq), RunID: "r", Tenant: "t", Type: typ, Time: t0.Add(at), CallID: call, Data: b}
	}
	evs := []events.Event{
		ev(1, 0, events.TypeStarted, "", events.StartedData{}),
		ev(2, 100*time.Millisecond, events.TypeApprovalRequested, "s1c1", events.ApprovalRequestedData{Kind: "approval", Tool: "draft_escalation"}),
		ev(3, 200*time.Millisecond, events.TypeParked, "", events.ParkedData{Awaiting: []string{"s1c1"}}),
		// A message that decides nothing leaves the run parked.
		ev(4, 10*time.Second, events.TypeApprovalRejected, "s1c1", events.ApprovalRejectedData{Class: "not_authorized", Decision: "approve", Approver: "intern"}),
		ev(5, 30*time.Second, events.TypeApproved, "s1c1", events.ApprovedData{Decision: "approve", Approver: "boss"}),
		ev(6, 30*time.Second+300*time.Millisecond, events.TypeFinished, "", events.FinishedData{Reason: events.ReasonDone}),
	}
	var out bytes.Buffer
	summarize(&out, evs, t0.Add(time.Hour))
	for _, want := range []string{
		"s1c1   draft_escalation   rejected not_authorized (approve by intern); APPROVED by boss after 29.9s",
		"time: active 500ms (what the budgets count), parked 29.8s waiting for humans (1 park)",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("summary lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "parked now") {
		t.Errorf("a finished run is reported parked:\n%s", out.String())
	}
}

// A run stopped while it waited for a human (a poison message) ended
// with its question unanswered: the audit says so, not "still pending",
// which would send an approver to answer a run that is over.
func TestAuditOfARunThatEndedUnansweredSaysSo(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	ev := func(seq int, at time.Duration, typ events.Type, call string, data any) events.Event {
		b, _ := json.Marshal(data)
		return events.Event{Seq: uint64(seq), RunID: "r", Tenant: "t", Type: typ, Time: t0.Add(at), CallID: call, Data: b}
	}
	parkedTrail := []events.Event{
		ev(1, 0, events.TypeStarted, "", events.StartedData{}),
		ev(2, 100*time.Millisecond, events.TypeApprovalRequested, "s1c1", events.ApprovalRequestedData{Kind: "approval", Tool: "draft_escalation"}),
		ev(3, 200*time.Millisecond, events.TypeParked, "", events.ParkedData{Awaiting: []string{"s1c1"}}),
	}
	for _, tc := range []struct {
		name string
		evs  []events.Event
		want string
	}{
		{"parked", parkedTrail, "s1c1   draft_escalation   still pending"},
		{"stopped", append(slices.Clone(parkedTrail), ev(4, time.Minute, events.TypeFinished, "", events.FinishedData{Reason: events.ReasonError, Detail: "poison"})),
			"s1c1   draft_escalation   unanswered: the run ended (the question is withdrawn)"},
	} {
		var out bytes.Buffer
		summarize(&out, tc.evs, t0.Add(time.Hour))
		if !strings.Contains(out.String(), tc.want) {
			t.Errorf("%s: summary lacks %q:\n%s", tc.name, tc.want, out.String())
		}
	}
}

func TestPrintableEscapesWhatCouldRewriteATerminal(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"plain text, ünïcode":     "plain text, ünïcode",
		"bell\a and \x1b[2J":      `bell\u0007 and \u001b[2J`,
		"right-to-left \u202e oh": `right-to-left \u202e oh`,
		"line\nbreak":             `line\u000abreak`,
	}
	for given, want := range cases {
		if got := printable(given); got != want {
			t.Errorf("printable(%q) = %q, want %q", given, got, want)
		}
	}
}

// --decision takes only a needs_human question's answers: --decision deny
// would send a denial without the reason deny requires. Nothing is sent.
func TestApproveDecisionTakesOnlyTheAnswersToAnUnknownOutcome(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	runID := parkedRun(t, srv, "decision-1")
	const key = exampleKeys + "supervisor@cityops.nk"
	for _, d := range []string{"deny", "approve", "bogus"} {
		code, out, errOut := run(t, "", "approve", runID, "s3c1", "--as", "supervisor@cityops", "--key", key,
			"--decision", d, "--yes", "--nats", srv.url, "--wait", "10s")
		if code != exitError || !strings.Contains(errOut, `--decision "`+d+`": want mark_done, retry or abandon`) {
			t.Errorf("approve --decision %s: exit %d, want %d and the flag named\n%s\n%s", d, code, exitError, out, errOut)
		}
	}
	code, out, errOut := run(t, "", "pending", "--nats", srv.url)
	if code != exitOK || !strings.Contains(out, runID) || !strings.Contains(out, "s3c1") {
		t.Errorf("s3c1 is no longer pending: exit %d\n%s\n%s", code, out, errOut)
	}
}

// A decision the follow of the run did not see in time (its consumer on a
// lagging server, a loaded machine) is still reported from one last read
// of the run, not as "no decision recorded". Here the follow has no time
// at all: the events are stored already.
func TestApproveReportsADecisionTheFollowMissed(t *testing.T) {
	t.Parallel()
	srv := natstest.Start(t)
	ctx := t.Context()
	const tenant, runID, seq = "cityops", "missed-1", 42
	approved, _ := events.EncodeData(events.ApprovedData{Decision: "approve", Approver: "supervisor@cityops", ApprovalSeq: seq})
	rejected, _ := events.EncodeData(events.ApprovalRejectedData{Class: approvals.RejectNotPending, Detail: "already decided", ApprovalSeq: seq + 1})
	trail := []events.Event{
		{Type: events.TypeStarted, Data: json.RawMessage(`{}`)},
		{Type: events.TypeApproved, Step: 1, CallID: "s1c1", Tool: "draft_escalation", Data: approved},
		{Type: events.TypeApprovalRejected, Step: 1, CallID: "s1c1", Tool: "draft_escalation", Data: rejected},
	}
	for i := range trail {
		trail[i].EventID, trail[i].RunID, trail[i].Tenant, trail[i].Seq, trail[i].Time = uuid.NewString(), runID, tenant, uint64(i+1), time.Now().UTC()
	}
	if _, err := srv.Journal.Append(ctx, 0, trail...); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		seq  uint64
		code int
		want string
	}{
		{seq, exitOK, "accepted: s1c1 approve by supervisor@cityops"},
		{seq + 1, exitApprovalRejected, "REJECTED (not_pending)"},
	} {
		var stdout, stderr bytes.Buffer
		code := awaitDecision(ctx, env{stdout: &stdout, stderr: &stderr}, srv.Journal, tenant, runID, tc.seq, time.Nanosecond, "")
		if code != tc.code || !strings.Contains(stdout.String(), tc.want) {
			t.Errorf("approval seq %d: exit %d, want %d, with %q in stdout:\n%s%s", tc.seq, code, tc.code, tc.want, stdout.String(), stderr.String())
		}
	}
}
