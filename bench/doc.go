// Package bench holds loopgate's benchmarks, in its test files only: what
// the JetStream journal can do on one embedded server (conditional appends,
// one event at a time and in atomic batches, under each fsync setting),
// the physical limit anything loopgate does on top is measured against.
//
//	go test -run '^$' -bench . ./bench
//
// Every benchmark runs once per fsync setting (sync=always, the embedded
// default, and sync=2m, JetStream's default) on a fresh embedded server,
// and reports rates with b.ReportMetric: events/s (events stored) and
// appends/s (acknowledged publish round trips: one per Append of one event,
// one per AppendBatch). See docs/durability.md for measured numbers.
package bench
