package cli

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/journal"
)

// shortBudgets warns of the agent profiles whose active-time budget
// (max_active) is under four times the ack wait (ackWait; 0: the
// default). A worker that dies leaves its runs' messages to be redelivered
// an ack wait later, and that wait counts as the run's active time once
// the next pass has begun (README, "Active time"): with such a budget a
// run whose worker dies a few times can end deadline for the waits alone,
// not for its work. (The example's profiles had 60s against the default
// 30s: two deaths.)
func shortBudgets(cfg *config.Config, ackWait time.Duration) []string {
	ackWait = cmp.Or(ackWait, journal.DefaultAckWait)
	var warnings []string
	for _, name := range slices.Sorted(maps.Keys(cfg.Agents)) {
		budget := cmp.Or(cfg.Agents[name].Limits.MaxActive.D(), config.DefaultLimits.MaxActive.D())
		if budget < 4*ackWait {
			warnings = append(warnings, fmt.Sprintf(
				"agent profile %q: max_active %s is under four times the ack wait (%s): a run whose worker dies a few times may end deadline for the redelivery waits alone; keep max_active well above the ack wait",
				name, budget, ackWait))
		}
	}
	return warnings
}
