// Package cityops is loopgate's worked example: a 311 escalation assistant
// for a city operations team. An operator asks, in one sentence, for the
// oldest unresolved complaints of a kind to be escalated; the assistant may
// read the complaints table and the procedures handbook and may write
// escalation drafts to an outbox, where each waits for a supervisor. It can
// never send anything, contact a resident or change a complaint.
//
// The package holds everything the example needs and nothing loopgate
// itself does:
//
//   - the data: a small complaints table and a procedures handbook, embedded;
//   - the built-in tools, added to a [tools.Builtins] by [Register]:
//     lookup_complaints, get_procedure, draft_escalation and slow_lookup
//     (a lookup that hangs, to show per-call deadlines);
//   - [Files]: the example's loopgate.yaml, the tools' argument schemas,
//     the scripted model's decision files and the approvers' example key
//     seeds ([ApproverSeed]; the policy requires signed approvals), so the
//     demo runs, and signs, from any directory;
//   - [Scenarios]: the named runs the demo and the golden tests replay, each
//     showing one behaviour (happy path, step budget, corrected arguments, a
//     timed-out tool, dry run, repeated calls, malformed decisions).
//
// The tools trust nothing they are given: loopgate has validated the
// arguments against the schemas already, and each tool decodes and checks
// them again. Complaint rows carry resident contact fields so that the
// manifests' views have something to keep out of the model's sight.
package cityops
