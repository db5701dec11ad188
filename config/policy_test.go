package config_test

import (
	"strings"
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

// policy.approvers.<id>.tenants: loaded as written, refused empty or with
// a name that is not a tenant token (naming the field), and read by
// ApproverDecidesFor: listed tenants only, every tenant when absent, no
// one for an id not in the policy.
func TestApproverTenants(t *testing.T) {
	t.Parallel()
	c, err := config.Load(files(withApprovers(
		"    boss: {roles: [supervisor], tenants: [cityops, parks]}\n"+
			"    anyone: {roles: [supervisor]}\n")), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		id, tenant string
		want       bool
	}{
		{"boss", "cityops", true}, {"boss", "parks", true}, {"boss", "harbour", false},
		{"anyone", "harbour", true}, {"nobody", "cityops", false},
	} {
		if got := c.ApproverDecidesFor(tt.id, tt.tenant); got != tt.want {
			t.Errorf("ApproverDecidesFor(%q, %q) = %v, want %v", tt.id, tt.tenant, got, tt.want)
		}
	}
	for given, want := range map[string]string{
		"    boss: {roles: [supervisor], tenants: []}\n":         "/policy/approvers/boss/tenants",
		"    boss: {roles: [supervisor], tenants: [city.ops]}\n": "/policy/approvers/boss/tenants/0",
	} {
		_, err := config.Load(files(withApprovers(given)), "loopgate.yaml")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %s", strings.TrimSpace(given), err, want)
		}
	}
}
