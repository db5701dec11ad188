// Package events defines loopgate's audit vocabulary: the event envelope of
// the v1 wire contract, the payload of each event type, the subjects and ids
// that name runs, calls and operations, and Fold, which turns a run's events
// back into the state the worker continues from.
//
// Events are deltas. Each one records only what its transition added, never a
// copy of the history, so a run's storage grows linearly with its steps and
// the model's context is rebuilt by folding.
//
// Nothing in this package touches the network; the journal package stores
// events on JetStream.
package events
