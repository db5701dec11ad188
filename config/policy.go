package config

import "slices"

// MayRun reports whether a principal holding roles may run the agent: the
// agent exists and one of the roles is among its profile's roles.
func (c *Config) MayRun(agent string, roles []string) bool {
	p, ok := c.Agents[agent]
	if !ok {
		return false
	}
	return slices.ContainsFunc(roles, func(r string) bool { return slices.Contains(p.Roles, r) })
}

// MayCall reports whether a principal holding roles may call tool: one of
// the roles lists it under call in the policy. Roles not in the policy
// grant nothing.
func (c *Config) MayCall(roles []string, tool string) bool {
	return slices.ContainsFunc(roles, func(r string) bool { return slices.Contains(c.Policy.Roles[r].Call, tool) })
}

// MayApprove reports whether an approver holding roles may approve calls of
// tool: one of the roles lists it under approve in the policy. An
// approver's roles come from the config, never from the approval message.
func (c *Config) MayApprove(roles []string, tool string) bool {
	return slices.ContainsFunc(roles, func(r string) bool { return slices.Contains(c.Policy.Roles[r].Approve, tool) })
}

// ApproverDecidesFor reports whether approver id may decide gated calls of
// tenant's runs: its tenants list names the tenant, or it has none (every
// tenant). An id not in the policy decides for no one.
func (c *Config) ApproverDecidesFor(id, tenant string) bool {
	a, ok := c.Policy.Approvers[id]
	return ok && (a.Tenants == nil || slices.Contains(a.Tenants, tenant))
}

// ApproverRoles returns the roles the policy gives approver id, and whether
// the id is a configured approver at all.
func (c *Config) ApproverRoles(id string) ([]string, bool) {
	a, ok := c.Policy.Approvers[id]
	return a.Roles, ok
}

// MayCancel reports whether requester id may cancel a run of tenant whose
// task is principal's and names agent: id is the task's principal, or a
// configured approver who decides for tenant and holds a role listing the
// agent (or "*") under cancel. The requester's roles come from the config,
// never from the cancel message.
func (c *Config) MayCancel(id, tenant, principal, agent string) bool {
	if id != "" && id == principal {
		return true
	}
	if !c.ApproverDecidesFor(id, tenant) {
		return false
	}
	roles, _ := c.ApproverRoles(id)
	return slices.ContainsFunc(roles, func(r string) bool {
		cancel := c.Policy.Roles[r].Cancel
		return slices.Contains(cancel, agent) || slices.Contains(cancel, "*")
	})
}
