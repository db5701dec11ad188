package config_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/loopgate/loopgate/config"
)

// refused loads given and returns the *config.Error, failing the test
// when the config loads.
func refused(t *testing.T, given string) *config.Error {
	t.Helper()
	_, err := config.Load(files(given), "loopgate.yaml")
	if err == nil {
		t.Fatal("Load() accepted the config; want ErrInvalid")
	}
	var ce *config.Error
	if !errors.As(err, &ce) || !errors.Is(err, config.ErrInvalid) {
		t.Fatalf("Load() error = %v, want a *config.Error", err)
	}
	return ce
}

// wantField fails unless some error of ce names field.
func wantField(t *testing.T, ce *config.Error, field string) {
	t.Helper()
	for _, fe := range ce.Errors {
		if fe.Field == field {
			return
		}
	}
	t.Errorf("Load() error = %q\nwant a FieldError on %s; got fields %+v", ce, field, ce.Errors)
}

// A role's argument constraints that named no tool, or no argument of the
// tool, used to load and constrain nothing: a typo let the role pass any
// value. A constraint on a real argument, here one of a schema read from a
// file, loads.
func TestRoleArgsMustNameKnownToolsAndArguments(t *testing.T) {
	t.Parallel()
	t.Run("unknown tool", func(t *testing.T) {
		t.Parallel()
		ce := refused(t, edit(t, "operator: {call: [lookup, draft]}",
			`operator: {call: [lookup, draft], args: {drfat: {text: ["hello"]}}}`))
		wantField(t, ce, "/policy/roles/operator/args/drfat")
	})
	t.Run("unknown argument", func(t *testing.T) {
		t.Parallel()
		ce := refused(t, edit(t, "operator: {call: [lookup, draft]}",
			`operator: {call: [lookup, draft], args: {draft: {txet: ["hello"]}}}`))
		wantField(t, ce, "/policy/roles/operator/args/draft/txet")
	})
	t.Run("known arguments", func(t *testing.T) {
		t.Parallel()
		c, err := config.Load(files(edit(t, "operator: {call: [lookup, draft]}",
			`operator: {call: [lookup, draft], args: {lookup: {category: ["noise"]}, draft: {text: ["hello"]}}}`)), "loopgate.yaml")
		if err != nil {
			t.Fatalf("Load() = %v, want the constraints on lookup.category and draft.text to load", err)
		}
		if got := c.Policy.Roles["operator"].Args["lookup"]["category"]; len(got) != 1 || string(got[0]) != `"noise"` {
			t.Errorf("operator's constraint on lookup.category = %s", got)
		}
	})
}

// A resource argument the tool's schema did not have used to load; it can
// never be set (additionalProperties is false), so the resource check
// never ran for the tool: a misspelt arg turned off tenant isolation.
func TestResourceArgMustBeAnArgumentOfTheTool(t *testing.T) {
	t.Parallel()
	ce := refused(t, edit(t, "    timeout: 2s\n",
		"    timeout: 2s\n    resources: [{arg: categroy, resolver: lookup}]\n"))
	wantField(t, ce, "/tools/0/resources/0/arg")

	if _, err := config.Load(files(edit(t, "    timeout: 2s\n",
		"    timeout: 2s\n    resources: [{arg: category, resolver: lookup}]\n")), "loopgate.yaml"); err != nil {
		t.Errorf("a resource on the schema's own argument, resolved by a read tool: Load() = %v", err)
	}
}

// A resolver is called with {"id": …} during the policy check, before
// any approval: a write tool as a resolver used to load, and ran a write
// ungated. Like reconcile tools, resolvers must be read tools.
func TestResolverMustNotBeAWriteTool(t *testing.T) {
	t.Parallel()
	ce := refused(t, edit(t, "    timeout: 2s\n",
		"    timeout: 2s\n    resources: [{arg: category, resolver: draft}]\n"))
	wantField(t, ce, "/tools/0/resources/0/resolver")
}

// An empty list used to be read as "no restriction": tenants: [] served
// every tenant and view.fields: [] showed every key of the result, the
// opposite of what it says. Now only a list left out means all.
func TestEmptyListsThatWouldMeanAllAreRejected(t *testing.T) {
	t.Parallel()
	t.Run("tenants", func(t *testing.T) {
		t.Parallel()
		ce := refused(t, edit(t, "    timeout: 2s\n", "    timeout: 2s\n    tenants: []\n"))
		wantField(t, ce, "/tools/0/tenants")
	})
	t.Run("view fields", func(t *testing.T) {
		t.Parallel()
		ce := refused(t, edit(t, "view: {fields: [id], max_items: 5}", "view: {fields: [], max_items: 5}"))
		wantField(t, ce, "/tools/0/view/fields")
	})
}

// Values the schema accepts but that do not decode (an int past int64, a
// duration past time.Duration) used to come back with Field "" and Go's
// own wording ("Go struct field Limits.agents.limits.max_steps"), which
// named neither the JSON pointer nor the agent; inside the tools array
// the index was left out too.
func TestDecodeErrorsNameTheField(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, old, new, field string }{
		{"integer out of range", "max_steps: 5", "max_steps: 99999999999999999999", "/agents/helper/limits/max_steps"},
		{"duration out of range", "max_active: 30s", "max_active: 99999999999h", "/agents/helper/limits/max_active"},
		{"in the tools array", "    timeout: 2s\n", "    timeout: 99999999999h\n", "/tools/0/timeout"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ce := refused(t, edit(t, tt.old, tt.new))
			wantField(t, ce, tt.field)
		})
	}
}

// The loader used to accept server values that startup then refused, in
// Go's names instead of the file's: sync_interval 0s ("natsd:
// Config.SyncInterval \"0s\": want always or a positive duration") and an
// ack_wait under 100ms ("journal: Layout.AckWait 50ms: want at least
// 100ms").
func TestServerValuesStartupRefusesAreRejectedByTheLoader(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ name, server, field string }{
		{"sync interval zero", "server: {sync_interval: 0s}\n", "/server/sync_interval"},
		{"ack wait under 100ms", "server: {ack_wait: 50ms}\n", "/server/ack_wait"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ce := refused(t, validYAML+tt.server)
			wantField(t, ce, tt.field)
		})
	}
}

// docs/configuration.md lists group_commit's values as auto, on, off;
// written the way it writes them (unquoted), they load as on and off. The loader
// once read YAML 1.1, which takes on/off for booleans, and answered
// "/server/group_commit: must be one of: auto, on, off".
func TestGroupCommitOnOffAsTheDocsWriteThem(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"on", "off"} {
		c, err := config.Load(files(validYAML+"server:\n  group_commit: "+v+"\n"), "loopgate.yaml")
		if err != nil {
			t.Errorf("group_commit: %s (unquoted): %v", v, err)
			continue
		}
		if string(c.Server.GroupCommit) != v {
			t.Errorf("group_commit: %s loaded as %q", v, c.Server.GroupCommit)
		}
	}
}

// max_run_observation_kib used to have no maximum; the worker computes
// MaxRunObservationKiB<<10, which overflows int from 2^53 on: at 2^54 it
// is 0, so a "practically unbounded" run budget cut every observation to
// the 64-byte floor.
func TestRunObservationBudgetThatOverflowsIsRejected(t *testing.T) {
	t.Parallel()
	ce := refused(t, edit(t, "      max_steps: 5\n", "      max_steps: 5\n      max_run_observation_kib: 18014398509481984\n"))
	wantField(t, ce, "/agents/helper/limits/max_run_observation_kib")
}

// A remote tool's subject inside loopgate's own or JetStream's namespaces
// used to load: each call was a publish into a stream or a JetStream API
// request (model-chosen arguments appended to the audit log or a KV
// bucket; on the embedded server, which has no authorization, a purge of
// the events stream); only then was the PubAck refused as "not a result".
func TestExecutorSubjectOutsideReservedNamespaces(t *testing.T) {
	t.Parallel()
	for _, subject := range []string{"loopgate.events.cityops.run.finished", "$KV.loopgate_approvals.k", "$JS.API.STREAM.PURGE.LOOPGATE_EVENTS"} {
		t.Run(strings.ReplaceAll(subject, ".", "_"), func(t *testing.T) {
			t.Parallel()
			ce := refused(t, edit(t, "    timeout: 2s\n", "    timeout: 2s\n    executor: {nats: \""+subject+"\"}\n"))
			wantField(t, ce, "/tools/0/executor/nats")
		})
	}
}
