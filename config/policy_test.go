package config_test

import (
	"testing"

	"github.com/loopgate/loopgate/config"
)

func TestPolicy(t *testing.T) {
	t.Parallel()
	c := &config.Config{
		Agents: map[string]config.Profile{
			"helper": {Roles: []string{"operator", "analyst"}},
		},
		Policy: config.Policy{Roles: map[string]config.Role{
			"operator":   {Call: []string{"lookup", "draft"}},
			"analyst":    {Call: []string{"lookup"}},
			"supervisor": {Approve: []string{"draft"}},
		}},
	}
	tests := []struct {
		name  string
		check func(roles []string) bool
		given []string
		want  bool
	}{
		{"run with a profile role", func(r []string) bool { return c.MayRun("helper", r) }, []string{"guest", "analyst"}, true},
		{"run without a profile role", func(r []string) bool { return c.MayRun("helper", r) }, []string{"supervisor"}, false},
		{"run with no roles", func(r []string) bool { return c.MayRun("helper", r) }, nil, false},
		{"run an unknown agent", func(r []string) bool { return c.MayRun("nope", r) }, []string{"operator"}, false},
		{"call a listed tool", func(r []string) bool { return c.MayCall(r, "draft") }, []string{"analyst", "operator"}, true},
		{"call an unlisted tool", func(r []string) bool { return c.MayCall(r, "draft") }, []string{"analyst"}, false},
		{"call with a role not in the policy", func(r []string) bool { return c.MayCall(r, "lookup") }, []string{"admin"}, false},
		{"approve does not grant call", func(r []string) bool { return c.MayCall(r, "draft") }, []string{"supervisor"}, false},
		{"approve a listed tool", func(r []string) bool { return c.MayApprove(r, "draft") }, []string{"supervisor"}, true},
		{"call does not grant approve", func(r []string) bool { return c.MayApprove(r, "draft") }, []string{"operator"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if got := tt.check(tt.given); got != tt.want {
				t.Errorf("got %v, want %v", got, tt.want)
			}
		})
	}
}
