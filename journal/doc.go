// Package journal is loopgate's JetStream side: the layout of streams,
// key-value buckets and the worker consumer (the v1 wire contract, created
// by Ensure), and the Journal, which appends a run's events to
// LOOPGATE_EVENTS and reads them back.
//
// The events stream is at once the audit log and each run's durable state.
// Append enforces one writer per run: every publish carries the run's
// expected last sequence for the subject filter loopgate.events.<tenant>.<run_id>.*,
// so a worker that lost the run to another gets ErrConflict instead of
// interleaving its events, and carries Nats-Msg-Id <run_id>/<seq>, so a
// retried publish is stored once. AppendBatch does the same for a group
// of a run's events, stored all-or-nothing through JetStream's atomic
// batch publish (nats-server 2.12+, enabled on the stream by Ensure). Load
// folds nothing: it returns the run's events and the sequence the next
// Append must expect; the events package turns them into state.
//
// Reads go through the stream leader's message-get API and short-lived
// ordered consumers; the streams do not enable direct get, whose answers
// may come from a follower that has not yet seen the last append.
package journal
