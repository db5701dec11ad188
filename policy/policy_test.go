package policy_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/loopgate/loopgate/config"
	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/policy"
	"github.com/loopgate/loopgate/tools"
)

func TestAuthorizeRunsItsChecksInOrder(t *testing.T) {
	t.Parallel()
	cfg := &config.Config{Policy: config.Policy{Roles: map[string]config.Role{
		"operator": {Call: []string{"draft", "lookup"}, Args: map[string]map[string][]json.RawMessage{
			"lookup": {"category": {json.RawMessage(`"sanitation"`), json.RawMessage(`"noise"`)}},
		}},
		"analyst": {Call: []string{"lookup"}},
		"guest":   {},
	}}}
	draft := tools.Manifest{Name: "draft", Resources: []tools.ResourceArg{{Arg: "request_id", Resolver: "owner"}}}
	lookup := tools.Manifest{Name: "lookup"}
	regional := tools.Manifest{Name: "draft", Tenants: []string{"harbortown"}}
	owners := map[string]policy.Owner{"SR-1": {Found: true, Tenant: "cityops"}, "SR-2": {Found: true, Tenant: "harbortown"}}
	resolve := func(_ context.Context, resolver, id string) (policy.Owner, error) {
		if id == "SR-broken" {
			return policy.Owner{}, errors.New("table unavailable")
		}
		return owners[id], nil
	}
	operator := events.Principal{ID: "dev", Roles: []string{"operator"}}
	cases := []struct {
		name      string
		principal events.Principal
		tool      tools.Manifest
		args      string
		want      policy.Check // "" allowed
		wantErr   bool
	}{
		{"allowed", operator, draft, `{"request_id":"SR-1"}`, "", false},
		{"a role that may not call it", events.Principal{ID: "g", Roles: []string{"guest"}}, draft, `{"request_id":"SR-1"}`, policy.ToolAllowed, false},
		{"roles the policy does not know grant nothing", events.Principal{ID: "x", Roles: []string{"admin"}}, lookup, `{}`, policy.ToolAllowed, false},
		{"the tool serves other tenants", operator, regional, `{}`, policy.Tenant, false},
		{"another tenant's resource", operator, draft, `{"request_id":"SR-2"}`, policy.Resource, false},
		{"an unknown resource is the tool's to report", operator, draft, `{"request_id":"SR-404"}`, "", false},
		{"a resource id that is not a string", operator, draft, `{"request_id":7}`, policy.Resource, false},
		{"a resolver that cannot answer", operator, draft, `{"request_id":"SR-broken"}`, "", true},
		{"tool before tenant before resource", events.Principal{ID: "g", Roles: []string{"guest"}}, regional, `{"request_id":"SR-2"}`, policy.ToolAllowed, false},
		{"a constrained argument within bounds", operator, lookup, `{"category":"noise"}`, "", false},
		{"a constrained argument out of bounds", operator, lookup, `{"category":"parking"}`, policy.Arguments, false},
		{"another permitting role without the constraint", events.Principal{ID: "a", Roles: []string{"operator", "analyst"}}, lookup, `{"category":"parking"}`, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			d, err := policy.Authorize(t.Context(), cfg, policy.Request{Principal: c.principal, Tenant: "cityops", Tool: c.tool, Args: json.RawMessage(c.args)}, resolve)
			if (err != nil) != c.wantErr {
				t.Fatalf("err = %v, wantErr %v", err, c.wantErr)
			}
			var got policy.Check
			if d != nil {
				got = d.Check
				if d.Reason == "" {
					t.Error("a denial without a reason")
				}
			}
			if got != c.want {
				t.Fatalf("check = %q (%+v), want %q", got, d, c.want)
			}
		})
	}
}
