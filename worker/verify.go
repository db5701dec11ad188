package worker

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// unverifiedCompletion says why a final answer cannot be taken for done,
// or "" when it can. A final answer is the model's account of the run;
// the one part of it a host can check is drafts_created, the things the
// model says its writes made: each must be a value of a write of this run
// that succeeded, in its observation (what the model was handed back: the
// CityOps drafts' paths and request ids) or its arguments (a write whose
// outcome a human marked done shows no result). A model that claims a
// draft no write made (a denied one, a dry run's preview, one it never
// tried) stops the run as completion_unverified, rather than being
// reported done with a claim the audit log contradicts. actions_taken is
// prose, and is not checked.
func (r *run) unverifiedCompletion(final *events.FinalAnswer) string {
	if final == nil || len(final.DraftsCreated) == 0 {
		return ""
	}
	shown := map[string]bool{}
	proposed := map[int]*events.Decision{} // by step: the latest decision, whose calls ran
	for _, t := range r.st.History {
		if t.Role == events.RoleAssistant && t.Decision != nil {
			proposed[t.Step] = t.Decision
		}
		if t.Role != events.RoleObservation || t.CallID == "" || r.manifest(t.Tool).Permission != tools.Write {
			continue
		}
		var o struct {
			Status string          `json:"status"`
			Data   json.RawMessage `json:"data"`
		}
		if json.Unmarshal(t.Content, &o) != nil || o.Status != obsOK {
			continue
		}
		var v any
		if json.Unmarshal(o.Data, &v) == nil {
			collectStrings(v, shown)
		}
		if d := proposed[t.Step]; d != nil {
			for _, c := range d.ToolCalls {
				if c.ID == t.CallID && json.Unmarshal(c.Args, &v) == nil {
					collectStrings(v, shown)
				}
			}
		}
	}
	for _, d := range final.DraftsCreated {
		if !shown[strings.TrimSpace(d)] {
			if len(shown) == 0 {
				return fmt.Sprintf("the final answer lists %q under drafts_created, and no write of this run succeeded", d)
			}
			return fmt.Sprintf("the final answer lists %q under drafts_created, which no successful write of this run shows", d)
		}
	}
	return ""
}

// collectStrings adds every string value in v, at any depth, to into.
func collectStrings(v any, into map[string]bool) {
	switch v := v.(type) {
	case string:
		into[strings.TrimSpace(v)] = true
	case []any:
		for _, x := range v {
			collectStrings(x, into)
		}
	case map[string]any:
		for _, x := range v {
			collectStrings(x, into)
		}
	}
}
