package cityops

import "slices"

// Scenario is one named run of the example: the agent profile in
// loopgate.yaml to run, the task's input and whether the task is a dry run.
// The profile's script decides what the model proposes; Description says
// what the run shows.
type Scenario struct {
	Name        string
	Agent       string
	Input       string
	DryRun      bool
	Description string
}

// escalateInput is the operator's one-sentence request most scenarios share.
const escalateInput = "Find the five oldest open sanitation complaints and draft an escalation for each one that qualifies."

var scenarios = []Scenario{
	{
		Name:        "happy",
		Agent:       "escalation-assistant",
		Input:       escalateInput,
		Description: "Reads the sanitation procedure, finds SR-10421, SR-10422 and SR-10423 past the 5-day threshold, drafts one escalation each and answers; every draft waits for human approval.",
	},
	{
		Name:        "runaway",
		Agent:       "runaway-assistant",
		Input:       escalateInput,
		Description: "The model calls lookup_complaints forever; the step budget (4) ends the run with reason max_steps and a full audit trail.",
	},
	{
		Name:        "correction",
		Agent:       "correcting-assistant",
		Input:       escalateInput,
		Description: "A lookup with older_than_days -5 is rejected with a field-level error the model corrects; then it asks for email_resident, which does not exist, and gets unknown_tool with the available tools.",
	},
	{
		Name:        "slow",
		Agent:       "slow-lookup-assistant",
		Input:       "Check the vendor copy of the open sanitation complaints older than five days.",
		Description: "slow_lookup hangs; the 2s per-call deadline ends the wait (outcome unknown, not failed) and the model recovers with lookup_complaints.",
	},
	{
		Name:        "dry-run",
		Agent:       "dry-run-assistant",
		Input:       "Draft an escalation for SR-10421.",
		DryRun:      true,
		Description: "A dry run: draft_escalation is validated, authorized and previewed with its operation id, and nothing is written to the outbox.",
	},
	{
		Name:        "repeat",
		Agent:       "repeating-assistant",
		Input:       escalateInput,
		Description: "The model repeats the same lookup with the same arguments; the third identical call ends the run with reason repeated_call.",
	},
	{
		Name:        "invalid",
		Agent:       "confused-assistant",
		Input:       escalateInput,
		Description: "The model proposes a call and an answer at once, then prose with a stray brace, then an empty object; each is rejected with field-level errors and the invalid-decision budget (2) ends the run.",
	},
}

// Scenarios returns the example's scenarios in demo order. The slice is a
// copy: callers may change it.
func Scenarios() []Scenario { return slices.Clone(scenarios) }

// ScenarioByName returns the scenario called name, and whether there is one.
func ScenarioByName(name string) (Scenario, bool) {
	i := slices.IndexFunc(scenarios, func(s Scenario) bool { return s.Name == name })
	if i < 0 {
		return Scenario{}, false
	}
	return scenarios[i], true
}
