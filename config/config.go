// Package config reads loopgate's configuration file: the tool manifests,
// the agent profiles, the policy and server settings. A config is YAML (or
// JSON), validated against schemas/config.schema.json and then decoded
// strictly, so a misspelt key is an error naming the field.
package config

import (
	"encoding/json"
	"io/fs"

	"github.com/loopgate/loopgate/events"
	"github.com/loopgate/loopgate/tools"
)

// Config is one loopgate configuration file.
type Config struct {
	// Version of the file format. Must be 1.
	Version int `json:"version"`
	// Server holds settings that serve/worker flags may override.
	Server Server `json:"server,omitzero"`
	// Intake bounds incoming tasks.
	Intake Intake `json:"intake,omitzero"`
	// Tools are the manifests of every tool any profile may use.
	Tools []tools.Manifest `json:"tools"`
	// Agents are the profiles a task's "agent" field names.
	Agents map[string]Profile `json:"agents"`
	// Policy says which roles may call and approve which tools.
	Policy Policy `json:"policy,omitzero"`
	// Pricing turns model usage into cost, by model name.
	Pricing map[string]Price `json:"pricing,omitempty"`
	// Redaction names what never reaches the audit stream in full.
	Redaction Redaction `json:"redaction,omitzero"`

	// Dir is the directory relative paths in the file are resolved against
	// (set by the loader, not read from the file). LoadFile sets it to an
	// absolute path; Load, reading from an fs.FS with no OS directory,
	// leaves it empty.
	Dir string `json:"-"`
	// dataDefaulted: Server.Data is the default, not the file's.
	dataDefaulted bool
	// FS holds the files the config refers to (argument schemas, scripts),
	// rooted at the config file's directory; ReadFile reads from it. Set by
	// the loader, not read from the file.
	FS fs.FS `json:"-"`
}

// Price is what a model charges, in USD per million tokens.
type Price struct {
	InputPerMTok  float64 `json:"input_per_mtok"`
	OutputPerMTok float64 `json:"output_per_mtok"`
}

// Cost prices usage.
func (p Price) Cost(u events.Usage) float64 {
	return (float64(u.InputTokens)*p.InputPerMTok + float64(u.OutputTokens)*p.OutputPerMTok) / 1e6
}

// PricedAs is the key of m's entry in the pricing table: the model name
// its answers are recorded under (the scripted provider's is "scripted").
func (m Model) PricedAs() string {
	if m.Provider == "scripted" {
		return "scripted"
	}
	return m.Name
}

// CostCounted reports whether a run of p has its cost counted: its model
// has a pricing entry. Without one a max_cost_usd would never stop it.
func (c *Config) CostCounted(p Profile) bool {
	_, ok := c.Pricing[p.Model.PricedAs()]
	return ok
}

// Redaction names sensitive keys and string patterns. Values under the
// keys, and matches of the patterns in any string, are replaced in every
// event before it is stored, and in observations per profile.
type Redaction struct {
	// Keys whose values are replaced whole, compared case-insensitively.
	// Defaults to redact.DefaultKeys (api_key, token, password, ssn, …).
	Keys []string `json:"keys,omitempty"`
	// Patterns: email, phone, iban, card, ssn, bearer. Defaults to all of
	// them (docs/redaction.md).
	Patterns []string `json:"patterns,omitempty"`
	// PhoneRegions are the regions (ISO 3166-1 alpha-2 codes) whose
	// nationally written phone numbers the phone pattern finds; numbers
	// written with + or 00 are found for every region. Defaults to
	// redact.DefaultPhoneRegions (US, GB, IE, FR, BE, NL, DE, AT, CH, ES, IT).
	PhoneRegions []string `json:"phone_regions,omitempty"`
	// SealKeyFile is the key-encryption key that seals what the redactor
	// replaces in a call's arguments, so that any worker can run the call
	// (package seal): 32 bytes, base64 or hex, in a file; relative to the
	// config file. Defaults to the LOOPGATE_SEAL_KEY environment variable;
	// without either, serve and worker refuse a config whose profiles
	// offer a write or a gated tool.
	SealKeyFile string `json:"seal_key_file,omitempty"`
}

// Server settings.
type Server struct {
	// Listen is the embedded server's client address. Defaults to 127.0.0.1:4222.
	Listen string `json:"listen,omitempty"`
	// Data is the directory of the JetStream file store and the tools'
	// files (outbox). Set in a file, a relative path is relative to the
	// file (LoadFile makes it absolute); the default, ./loopgate-data, is
	// relative to the working directory, as the --data flag is.
	Data string `json:"data,omitempty"`
	// Workers is the number of concurrent runs a process works on. Defaults to 4.
	Workers int `json:"workers,omitempty"`
	// SyncInterval is the embedded server's fsync interval: "always" or a
	// duration such as "2m". Defaults to "always".
	SyncInterval string `json:"sync_interval,omitempty"`
	// Replicas of the streams and KV buckets loopgate creates. Defaults to 1.
	Replicas int `json:"replicas,omitempty"`
	// GroupCommit is whether appends of different runs that wait at the
	// same time share atomic batches (journal.WithGroupCommit): "auto"
	// (the default: on with the embedded server at sync_interval always
	// and one replica, where every append is an fsync; off otherwise),
	// "on" or "off".
	GroupCommit OnOff `json:"group_commit,omitempty"`
	// AckWait is how long a worker may hold a work message without a
	// heartbeat before JetStream gives it to another worker. Defaults to 30s.
	AckWait events.Duration `json:"ack_wait,omitempty"`
	// MaxDeliver bounds deliveries of a work message; then its run stops
	// with reason error. Defaults to 5.
	MaxDeliver int `json:"max_deliver,omitempty"`
	// IdempotencyMaxAge is how long an operation's record stays in
	// loopgate_idempotency after its last write. Defaults to 720h (30
	// days); at least a day beyond the work messages' delivery deadlines
	// (ack_wait, doubled at each of max_deliver deliveries).
	IdempotencyMaxAge events.Duration `json:"idempotency_max_age,omitempty"`
}

// Intake bounds incoming tasks.
type Intake struct {
	// MaxTaskBytes bounds a task message. Defaults to 65536.
	MaxTaskBytes int `json:"max_task_bytes,omitempty"`
	// MaxInputBytes bounds a task's input field. Defaults to 16384.
	MaxInputBytes int `json:"max_input_bytes,omitempty"`
}

// Profile is an agent: a model, the tools it is offered, who may run it and
// the limits its runs obey.
type Profile struct {
	// Description for operators.
	Description string `json:"description,omitempty"`
	// Instructions are the system prompt a real model receives.
	Instructions string `json:"instructions,omitempty"`
	// Model chooses the provider.
	Model Model `json:"model"`
	// Tools offered to the model, by manifest name.
	Tools []string `json:"tools"`
	// Roles whose principals may run this agent. Required.
	Roles []string `json:"roles"`
	// Limits of each run; a task may only tighten them.
	Limits events.Limits `json:"limits,omitzero"`
	// SessionBudgetBytes bounds the session memory a run of this agent is
	// shown; older exchanges are compacted. Defaults to 8192.
	SessionBudgetBytes int `json:"session_budget_bytes,omitempty"`
	// RedactObservations redacts the observations this agent's model
	// reads, not only the stored events. Defaults to true.
	RedactObservations *bool `json:"redact_observations,omitempty"`
	// ApprovalTTL is how long an approval of this agent's calls may stay
	// pending before it expires (a tool's own TTL wins). Defaults to 24h.
	ApprovalTTL events.Duration `json:"approval_ttl,omitempty"`
}

// Model chooses and configures a model provider. The settings after Script
// are for the HTTP providers ("openai", "anthropic") only; their defaults
// are applied by providers.Build, which also reads the API key.
type Model struct {
	// Provider: "scripted" (replays recorded decisions), "openai" (any
	// server speaking OpenAI's Chat Completions: OpenAI, Ollama, vLLM,
	// llama.cpp's server, LM Studio) or "anthropic" (the Messages API).
	Provider string `json:"provider"`
	// Script is the scripted provider's file of decisions, relative to Dir.
	Script string `json:"script,omitempty"`

	// BaseURL is the API's base URL, e.g. http://localhost:11434/v1 for
	// Ollama. Defaults to https://api.openai.com/v1 (openai) or
	// https://api.anthropic.com (anthropic).
	BaseURL string `json:"base_url,omitempty"`
	// Name is the model to ask, as the server names it (gpt-4.1-mini,
	// claude-sonnet-4-5, qwen3:8b). Required for the HTTP providers.
	Name string `json:"model,omitempty"`
	// APIKeyEnv names the environment variable holding the API key; the
	// key itself is never in the file. Defaults to OPENAI_API_KEY or
	// ANTHROPIC_API_KEY, read only when BaseURL is the provider's own API:
	// a key for another server must be named explicitly. Once named, the
	// variable must be set.
	APIKeyEnv string `json:"api_key_env,omitempty"`
	// RequestTimeout bounds one HTTP attempt; the run's deadline bounds
	// them all. Defaults to 2m.
	RequestTimeout events.Duration `json:"request_timeout,omitempty"`
	// MaxRetries bounds the retries of a request refused with 408, 429 or
	// 5xx, or lost in transit; 0 means none. Defaults to 2.
	MaxRetries *int `json:"max_retries,omitempty"`
	// MaxTokens bounds the tokens of one answer. Defaults to 4096
	// (anthropic, where it is required) or the server's own limit (openai).
	MaxTokens int `json:"max_tokens,omitempty"`
	// Strict asks an OpenAI server to constrain tool arguments to their
	// schemas (function strict mode), for the schemas strict mode can
	// express. Defaults to true for api.openai.com, false for other servers.
	Strict *bool `json:"strict,omitempty"`
}

// Policy says which roles may do what.
type Policy struct {
	// Roles by name.
	Roles map[string]Role `json:"roles,omitempty"`
	// Approvers by id, with their roles. An approval message names only
	// its approver; the roles come from here.
	Approvers map[string]Approver `json:"approvers,omitempty"`
	// AllowSelfApproval lets an approver approve a call of a run they are
	// the principal of. Defaults to false.
	AllowSelfApproval bool `json:"allow_self_approval,omitempty"`
	// RequireSignatures rejects approval messages that are not signed with
	// their approver's key (Approver.PublicKey); every approver then needs
	// a key. A signature that is present is verified either way. Defaults
	// to false.
	RequireSignatures bool `json:"require_signatures,omitempty"`
	// ApprovalMaxAge is how long before it reached the approvals stream an
	// approval may have been signed; older (a replay) or more than 30s in
	// the future, it is rejected. Defaults to 5m.
	ApprovalMaxAge events.Duration `json:"approval_max_age,omitempty"`
}

// Approver is someone who may decide on gated calls.
type Approver struct {
	// Roles of the approver; Role.Approve lists what each may approve.
	Roles []string `json:"roles"`
	// PublicKey is the approver's user nkey ("U…", from loopgate keys
	// new): their signed approvals are verified against it. Optional
	// unless Policy.RequireSignatures.
	PublicKey string `json:"public_key,omitempty"`
	// Tenants whose gated calls the approver may decide. Defaults to
	// every tenant: NATS permissions (who may publish on which tenant's
	// approvals subjects) are then the only fence, and a signed approval
	// is valid on any tenant's subject its sender can reach.
	Tenants []string `json:"tenants,omitempty"`
}

// Role lists what principals holding it may do.
type Role struct {
	// Call lists the tools the role may call.
	Call []string `json:"call,omitempty"`
	// Approve lists the tools whose calls the role may approve.
	Approve []string `json:"approve,omitempty"`
	// Cancel lists the agent profiles whose runs the role may cancel, or
	// "*" for every agent's.
	Cancel []string `json:"cancel,omitempty"`
	// Args constrains, per tool and argument, the values this role may
	// pass: a call is allowed through this role only if each constrained
	// argument it sets holds one of the listed values.
	Args map[string]map[string][]json.RawMessage `json:"args,omitempty"`
}

// OnOff is a setting written auto, on or off. true and false are read as
// "on" and "off", so a file that writes a boolean means what it says.
type OnOff string

// UnmarshalJSON accepts a string or a boolean.
func (o *OnOff) UnmarshalJSON(b []byte) error {
	switch string(b) {
	case "true":
		*o = "on"
		return nil
	case "false":
		*o = "off"
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	*o = OnOff(s)
	return nil
}
