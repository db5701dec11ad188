package cli

import (
	"strings"
	"testing"
	"time"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/examples/cityops"
)

func TestShortBudgetsNameTheProfilesUnderFourTimesTheAckWait(t *testing.T) {
	cfg := &config.Config{Agents: map[string]config.Profile{
		"tight":   {Limits: events.Limits{MaxActive: events.Duration(119 * time.Second)}},
		"enough":  {Limits: events.Limits{MaxActive: events.Duration(2 * time.Minute)}},
		"default": {}, // config.DefaultLimits: 2m
	}}
	for _, tt := range []struct {
		ackWait time.Duration
		want    []string
	}{
		{0, []string{`"tight"`}}, // the default ack wait, 30s
		{30 * time.Second, []string{`"tight"`}},
		{31 * time.Second, []string{`"default"`, `"enough"`, `"tight"`}},
		{10 * time.Second, nil},
	} {
		got := shortBudgets(cfg, tt.ackWait)
		if len(got) != len(tt.want) {
			t.Errorf("ack wait %s: %d warnings %q, want %d naming %v", tt.ackWait, len(got), got, len(tt.want), tt.want)
			continue
		}
		for i, w := range got {
			if !strings.Contains(w, tt.want[i]) || !strings.Contains(w, "max_active") {
				t.Errorf("ack wait %s: warning %q, want it to name %s and max_active", tt.ackWait, w, tt.want[i])
			}
		}
	}
}

// The example's profiles follow the advice: a worker's crash does not end
// their runs deadline at the default ack wait.
func TestTheExampleBudgetsOutlastTheDefaultAckWait(t *testing.T) {
	for _, file := range []string{"../examples/cityops/" + cityops.ConfigFile, "../examples/cityops/remote.yaml"} {
		cfg, err := config.LoadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if w := shortBudgets(cfg, 0); len(w) != 0 {
			t.Errorf("%s: %q", file, w)
		}
	}
}

// serve says so at start, once per profile, where an operator looks.
func TestServeWarnsOfBudgetsUnderFourAckWaits(t *testing.T) {
	t.Parallel()
	srv := startServe(t, t.TempDir(), "--ack-wait", "2m") // the example's 5m is under 8m
	logs := srv.stderr.String()
	for _, name := range []string{"escalation-assistant", "runaway-assistant"} {
		if !strings.Contains(logs, `agent profile \"`+name+`\": max_active 5m0s is under four times the ack wait (2m0s)`) {
			t.Errorf("no warning about %s's max_active:\n%s", name, logs)
		}
	}
}
