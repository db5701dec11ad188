package worker

import (
	"encoding/json"
	"slices"
	"strconv"
	"sync"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// clearReads serves a profile whose model reads observations unredacted
// (redact_observations: false). Events hold results and observations
// redacted, always, and so does the run's state, which is folded from
// them; the model of such a profile is shown, instead, the observations
// of the calls this worker ran in this pass made from their results as
// the tools returned them (bounded as the events bound them). They live
// in this worker's memory only: a run taken up again (after an approval,
// a wake-up, another worker's crash) shows its model the stored,
// redacted, observations of the calls observed before. Its zero value is
// ready to use; a run's calls run concurrently, so it locks.
type clearReads struct {
	mu sync.Mutex
	// results are the tools' clear results, by call id, of the attempt
	// named.
	results map[string]clearResult
	// observations are the clear observations the model reads instead of
	// the stored ones, by step and call id (clearKey).
	observations map[string]json.RawMessage
}

type clearResult struct {
	attempt int
	result  json.RawMessage
	bytes   int // the result's size when cut to the bound, as ExecutedData.ResultBytes
}

// readsClear reports whether the run's model reads unredacted observations.
func (r *run) readsClear() bool {
	return r.profile.RedactObservations != nil && !*r.profile.RedactObservations
}

// keepClear keeps result, what attempt a's tool returned, for the
// observation its model reads. Safe for concurrent calls.
func (r *run) keepClear(a *attempt, result json.RawMessage) {
	if !r.readsClear() {
		return
	}
	out, cut := tools.Bound(strictJSON(result), maxRecordedResult)
	kept := clearResult{attempt: a.ex.Attempt, result: out}
	if cut {
		kept.bytes = len(result)
	}
	r.clear.mu.Lock()
	defer r.clear.mu.Unlock()
	if r.clear.results == nil {
		r.clear.results = map[string]clearResult{}
	}
	r.clear.results[a.c.Call.ID] = kept
}

// observeClear makes the observation c's model reads in place of the
// stored one about to be appended, from the clear result of its last
// attempt when this worker ran it and it succeeded. Otherwise the model
// reads the stored observation.
func (r *run) observeClear(c *events.CallState) error {
	if !r.readsClear() {
		return nil
	}
	x := c.LastExecuted()
	r.clear.mu.Lock()
	kept, ok := r.clear.results[c.Call.ID]
	r.clear.mu.Unlock()
	if x == nil || !ok || x.Status != events.ExecOK || kept.attempt != x.Attempt {
		return nil
	}
	clear := *c
	clear.Executed = slices.Clone(c.Executed)
	last := &clear.Executed[len(clear.Executed)-1]
	last.Result, last.ResultBytes = kept.result, kept.bytes
	o, _ := r.observe(&clear)
	obs, err := bounded(o, r.observationLimit(), nil)
	if err != nil {
		return err
	}
	r.clear.mu.Lock()
	defer r.clear.mu.Unlock()
	if r.clear.observations == nil {
		r.clear.observations = map[string]json.RawMessage{}
	}
	r.clear.observations[clearKey(r.st.CurrentStep, c.Call.ID)] = obs.Observation
	return nil
}

// modelHistory is the history the run's model is shown: the state's,
// with the clear observations in place of the stored ones.
func (r *run) modelHistory() []events.Turn {
	r.clear.mu.Lock()
	defer r.clear.mu.Unlock()
	if len(r.clear.observations) == 0 {
		return r.st.History
	}
	h := slices.Clone(r.st.History)
	for i, t := range h {
		if t.Role != events.RoleObservation || t.CallID == "" {
			continue
		}
		if o, ok := r.clear.observations[clearKey(t.Step, t.CallID)]; ok {
			h[i].Content = o
		}
	}
	return h
}

func clearKey(step int, callID string) string { return strconv.Itoa(step) + "/" + callID }
