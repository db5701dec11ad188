package cli

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
)

// loopgate audit --security lists the tenant-level security records the
// workers write for approvals no run of their subject's tenant can hold:
// every tenant's, one tenant's, or those claiming one run, as a listing or
// as the stored envelopes; loopgate audit RECORD_ID shows one as a
// timeline; and the run the refused approval named shows none of it.
func TestAuditSecurityListsTheRecordsOfRefusedApprovals(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir())
	runID := parkedRun(t, srv, "audit-security-1")
	nc, err := nats.Connect(srv.url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	records := make(chan *nats.Msg, 8)
	sub, err := nc.ChanSubscribe(events.SecurityFilter(""), records)
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Unsubscribe()
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}

	// supervisor@cityops's signed approval of the parked run's call, on
	// tenant harbour's subject; then one for a run no tenant has.
	seed, err := cityops.ApproverSeed("supervisor@cityops")
	if err != nil {
		t.Fatal(err)
	}
	key, err := approvals.ParseSeed(seed)
	if err != nil {
		t.Fatal(err)
	}
	hash := "sha256:" + strings.Repeat("0f", 32)
	publish := func(tenant, run string) uint64 {
		t.Helper()
		m := approvals.Message{RunID: run, CallID: "s3c1", ArgsHash: hash, Decision: approvals.Approve, Approver: approvals.Approver{ID: "supervisor@cityops"}}
		if err := approvals.Sign(&m, key, time.Now()); err != nil {
			t.Fatal(err)
		}
		payload, _ := json.Marshal(m)
		reply, err := nc.Request(events.ApprovalSubject(tenant, run, "s3c1"), payload, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		var ack struct {
			Seq uint64 `json:"seq"`
		}
		if err := json.Unmarshal(reply.Data, &ack); err != nil || ack.Seq == 0 {
			t.Fatalf("publish approval: %s (%v)", reply.Data, err)
		}
		return ack.Seq
	}
	seq := publish("harbour", runID)
	ghost := events.RunID("cityops", "no-such-task")
	ghostSeq := publish("cityops", ghost)
	for range 3 {
		select {
		case <-records:
		case <-time.After(30 * time.Second):
			t.Fatalf("the workers wrote fewer than 3 security records\n%s", srv.stderr.String())
		}
	}

	code, out, errOut := run(t, "", "audit", "--security", "--json", "--nats", srv.url)
	if code != exitOK {
		t.Fatalf("audit --security --json: exit %d\n%s", code, errOut)
	}
	byRecord := map[string]events.Event{}
	var order []events.Event // as the stream holds them
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		var e events.Event
		if err := json.Unmarshal([]byte(line), &e); err != nil || e.Type != events.TypeSecurity {
			t.Fatalf("not a security record envelope: %s (%v)", line, err)
		}
		byRecord[e.Tenant+"/"+e.RunID] = e
		order = append(order, e)
	}
	harbour, ok1 := byRecord["harbour/"+events.SecurityRecordID("harbour", seq)]
	own, ok2 := byRecord["cityops/"+events.SecurityRecordID("cityops", seq)]
	none, ok3 := byRecord["cityops/"+events.SecurityRecordID("cityops", ghostSeq)]
	if len(byRecord) != 3 || !ok1 || !ok2 || !ok3 {
		t.Fatalf("audit --security --json printed %d records, want harbour's and cityops' of seq %d and cityops' of seq %d:\n%s", len(byRecord), seq, ghostSeq, out)
	}

	line := func(e events.Event, class, tenant, run, detail string, aseq uint64) string {
		return fmt.Sprintf("  %s  %-12s record %s\n      SECURITY %s: approve by supervisor@cityops (signature verified) for run %s call s3c1, approvals seq %d on loopgate.approvals.%s.%s.s3c1 — %s\n",
			e.Time.UTC().Format("2006-01-02 15:04:05.000"), e.Tenant, e.RunID, class, run, aseq, tenant, run, detail)
	}
	harbourLine := line(harbour, "unknown_run", "harbour", runID, "tenant harbour has no run "+runID+": the message decides nothing", seq)
	ownLine := line(own, "other_tenant", "harbour", runID, "an approval for call s3c1 of this tenant's run "+runID+" came on tenant harbour's subject: the message decides nothing, and the run's trail does not hold it", seq)
	noneLine := line(none, "unknown_run", "cityops", ghost, "tenant cityops has no run "+ghost+": the message decides nothing", ghostSeq)

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"every tenant", nil, "security records (every tenant): 3\n" + listed(order, map[string]string{
			harbour.RunID: harbourLine, own.RunID: ownLine, none.RunID: noneLine})},
		{"one tenant", []string{"--tenant", "harbour"}, "security records (tenant harbour): 1\n" + harbourLine},
		{"one run", []string{runID}, "security records (every tenant, claiming run " + runID + "): 2\n" + listed(order,
			map[string]string{harbour.RunID: harbourLine, own.RunID: ownLine})},
		{"a tenant without any", []string{"--tenant", "elsewhere"}, "no security records (tenant elsewhere)\n"},
	} {
		args := append([]string{"audit", "--security", "--nats", srv.url}, tc.args...)
		code, out, errOut := run(t, "", args...)
		if code != exitOK || out != tc.want {
			t.Errorf("%s: loopgate %s: exit %d\n got:\n%s\nwant:\n%s\nstderr: %s", tc.name, strings.Join(args, " "), code, out, tc.want, errOut)
		}
	}

	code, out, _ = run(t, "", "audit", harbour.RunID, "--tenant", "harbour", "--nats", srv.url)
	if code != exitOK || !strings.Contains(out, "security           ") || !strings.Contains(out, "SECURITY unknown_run: approve by supervisor@cityops (signature verified) for run "+runID) {
		t.Errorf("audit of the record: exit %d\n%s", code, out)
	}
	code, out, _ = run(t, "", "audit", runID, "--nats", srv.url)
	if code != exitOK || strings.Contains(out, "SECURITY") || strings.Contains(out, "harbour") {
		t.Errorf("audit of the run the refused approval named shows it (exit %d):\n%s", code, out)
	}

	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"--follow"}, "--follow does not apply to --security"},
		{[]string{"--tenant", "a.b"}, `--tenant "a.b" is not a valid subject token`},
		{[]string{"run.id"}, `run id "run.id" is not a run id`},
	} {
		args := append([]string{"audit", "--security", "--nats", srv.url}, bad.args...)
		if code, _, errOut := run(t, "", args...); code != exitError || !strings.Contains(errOut, bad.want) {
			t.Errorf("loopgate %s: exit %d, stderr %q; want exit %d naming %q", strings.Join(args, " "), code, errOut, exitError, bad.want)
		}
	}
}

// listed is the lines of the records in order that lines has, in that
// order.
func listed(order []events.Event, lines map[string]string) string {
	var b strings.Builder
	for _, e := range order {
		b.WriteString(lines[e.RunID])
	}
	return b.String()
}
