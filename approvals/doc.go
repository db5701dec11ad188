// Package approvals holds the human side of the write path: the approval
// message approvers publish (schemas/approval.schema.json), the state of
// each gated call in the loopgate_approvals KV bucket, and the rules that
// decide whether a message may change that state.
//
// A gated call's entry goes pending → approved | denied | expired exactly
// once, by compare-and-set on the entry's revision: the first valid
// decision wins and everything after it is recorded as a no-op. A call
// whose outcome is unknown gets a second round (kind needs_human) decided
// by mark_done, retry or abandon.
//
// An approval may be signed with the approver's nkey (signature.go):
// SigningPayload says which bytes, Sign and VerifySignature do the
// cryptography, and Check verifies against the key the policy gives the
// approver, right after the not_pending no-op and before anything else.
package approvals
