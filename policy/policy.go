// Package policy decides whether a principal may make one call. The
// model's suggestions never widen what a caller may do: every validated
// call passes these checks, in this order, and the first that fails is
// audited by name and stops the run (no negotiation, no other route):
//
//  1. tool_allowed — one of the principal's roles may call the tool;
//  2. tenant       — the tool serves the task's tenant;
//  3. resource     — every resource the arguments name belongs to the
//     task's tenant (resolved by the tool's resolver, never trusted from
//     the arguments);
//  4. arguments    — constrained arguments hold values a permitting role
//     may pass.
//
// Whether an allowed call then needs a human's approval is the write
// path's decision (approval required by the manifest, or taint).
package policy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// Check names a policy check.
type Check string

// Checks, in the order they run.
const (
	ToolAllowed Check = "tool_allowed"
	Tenant      Check = "tenant"
	Resource    Check = "resource"
	Arguments   Check = "arguments"
)

// Denial says which check refused a call, and why.
type Denial struct {
	Check  Check
	Reason string
}

// Request is one call to authorize.
type Request struct {
	Principal events.Principal
	Tenant    string
	Tool      tools.Manifest
	// Args are the validated, canonical arguments.
	Args json.RawMessage
}

// Owner is what a resolver says about a resource.
type Owner struct {
	Found  bool   `json:"found"`
	Tenant string `json:"tenant"`
}

// ResolveFunc asks resolver who owns resource id.
type ResolveFunc func(ctx context.Context, resolver, id string) (Owner, error)

// Authorize runs the checks. It returns nil when the call is allowed, a
// Denial when a check refuses it, and an error only when a resolver could
// not answer (the caller retries later rather than guess).
func Authorize(ctx context.Context, cfg *config.Config, req Request, resolve ResolveFunc) (*Denial, error) {
	tool := req.Tool.Name
	var permitting []string
	for _, r := range req.Principal.Roles {
		if slices.Contains(cfg.Policy.Roles[r].Call, tool) {
			permitting = append(permitting, r)
		}
	}
	if len(permitting) == 0 {
		return &Denial{ToolAllowed, fmt.Sprintf("principal %s with roles %v may not call %s", req.Principal.ID, req.Principal.Roles, tool)}, nil
	}
	if len(req.Tool.Tenants) > 0 && !slices.Contains(req.Tool.Tenants, req.Tenant) {
		return &Denial{Tenant, fmt.Sprintf("%s serves tenants %v, not %s", tool, req.Tool.Tenants, req.Tenant)}, nil
	}
	var args map[string]json.RawMessage
	if err := json.Unmarshal(req.Args, &args); err != nil {
		return &Denial{Arguments, "arguments are not a JSON object"}, nil
	}
	for _, res := range req.Tool.Resources {
		raw, ok := args[res.Arg]
		if !ok {
			continue
		}
		var id string
		if err := json.Unmarshal(raw, &id); err != nil {
			return &Denial{Resource, fmt.Sprintf("argument %s must name a resource by a string id", res.Arg)}, nil
		}
		owner, err := resolve(ctx, res.Resolver, id)
		if err != nil {
			return nil, fmt.Errorf("resolve %s %q: %w", res.Arg, id, err)
		}
		// A resource nobody owns is the tool's to report as not found;
		// one owned by another tenant is not the caller's to touch.
		if owner.Found && owner.Tenant != req.Tenant {
			return &Denial{Resource, fmt.Sprintf("%s %s belongs to another tenant, not %s", res.Arg, id, req.Tenant)}, nil
		}
	}
	// Allowed if some permitting role has no constraint the call breaks.
	var broken string
	for _, r := range permitting {
		reason := constraintBroken(cfg.Policy.Roles[r].Args[tool], args)
		if reason == "" {
			return nil, nil
		}
		broken = fmt.Sprintf("role %s: %s", r, reason)
	}
	return &Denial{Arguments, broken}, nil
}

// constraintBroken returns why args break the constraints, or "".
func constraintBroken(constraints map[string][]json.RawMessage, args map[string]json.RawMessage) string {
	for _, arg := range sortedKeys(constraints) {
		v, ok := args[arg]
		if !ok {
			continue
		}
		canon, err := tools.Canonical(v)
		if err != nil {
			return fmt.Sprintf("argument %s is not canonical JSON", arg)
		}
		allowed := slices.ContainsFunc(constraints[arg], func(a json.RawMessage) bool {
			ca, err := tools.Canonical(a)
			return err == nil && bytes.Equal(ca, canon)
		})
		if !allowed {
			return fmt.Sprintf("argument %s may not be %s", arg, canon)
		}
	}
	return ""
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
