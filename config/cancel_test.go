package config_test

import (
	"testing"

	"github.com/loopgate/loopgate/config"
)

// Who may cancel a run: its task's principal, or an approver of its
// tenant holding a role that lists its agent (or "*") under cancel. The
// roles are the policy's, never the message's.
func TestMayCancel(t *testing.T) {
	t.Parallel()
	c := &config.Config{Policy: config.Policy{
		Roles: map[string]config.Role{
			"supervisor": {Approve: []string{"draft"}, Cancel: []string{"helper"}},
			"admin":      {Cancel: []string{"*"}},
			"operator":   {Call: []string{"draft"}},
		},
		Approvers: map[string]config.Approver{
			"sup@a":   {Roles: []string{"supervisor"}, Tenants: []string{"a"}},
			"admin":   {Roles: []string{"admin"}},
			"op@a":    {Roles: []string{"operator"}},
			"sup@any": {Roles: []string{"supervisor"}},
		},
	}}
	tests := []struct {
		name                         string
		id, tenant, principal, agent string
		want                         bool
	}{
		{"the task's principal", "dev@a", "a", "dev@a", "helper", true},
		{"the principal needs no role", "dev@a", "a", "dev@a", "other", true},
		{"a role listing the agent", "sup@a", "a", "dev@a", "helper", true},
		{"a role not listing the agent", "sup@a", "a", "dev@a", "other", false},
		{"a role with * for every agent", "admin", "b", "dev@b", "other", true},
		{"outside the approver's tenants", "sup@a", "b", "dev@b", "helper", false},
		{"an approver of every tenant", "sup@any", "b", "dev@b", "helper", true},
		{"an approver whose roles do not cancel", "op@a", "a", "dev@a", "helper", false},
		{"someone the policy does not name", "stranger", "a", "dev@a", "helper", false},
		{"an empty id is nobody's", "", "a", "", "helper", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := c.MayCancel(tt.id, tt.tenant, tt.principal, tt.agent); got != tt.want {
				t.Errorf("MayCancel(%q, %q, %q, %q) = %v, want %v", tt.id, tt.tenant, tt.principal, tt.agent, got, tt.want)
			}
		})
	}
}
