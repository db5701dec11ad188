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
	// Redaction names what never reaches the audit stream in full.
	Redaction Redaction `json:"redaction,omitzero"`

	// Dir is the directory relative paths in the file are resolved against
	// (set by the loader, not read from the file). LoadFile sets it to an
	// absolute path; Load, reading from an fs.FS with no OS directory,
	// leaves it empty.
	Dir string `json:"-"`
	// FS holds the files the config refers to (argument schemas, scripts),
	// rooted at the config file's directory; ReadFile reads from it. Set by
	// the loader, not read from the file.
	FS fs.FS `json:"-"`
}

// Redaction names sensitive keys and string patterns. Values under the
// keys, and matches of the patterns in any string, are replaced in every
// event before it is stored, and in observations per profile.
type Redaction struct {
	// Keys whose values are replaced whole, compared case-insensitively.
	// Defaults to redact.DefaultKeys (api_key, token, password, ssn, …).
	Keys []string `json:"keys,omitempty"`
	// Patterns: email, phone, card, ssn, bearer. Defaults to all of them.
	Patterns []string `json:"patterns,omitempty"`
}

// Server settings.
type Server struct {
	// Listen is the embedded server's client address. Defaults to 127.0.0.1:4222.
	Listen string `json:"listen,omitempty"`
	// Data is the directory of the JetStream file store and the tools'
	// files (outbox). Defaults to ./loopgate-data.
	Data string `json:"data,omitempty"`
	// Workers is the number of concurrent runs a process works on. Defaults to 4.
	Workers int `json:"workers,omitempty"`
	// SyncInterval is the embedded server's fsync interval: "always" or a
	// duration such as "2m". Defaults to "always".
	SyncInterval string `json:"sync_interval,omitempty"`
	// Replicas of the streams and KV buckets loopgate creates. Defaults to 1.
	Replicas int `json:"replicas,omitempty"`
	// AckWait is how long a worker may hold a work message without a
	// heartbeat before JetStream gives it to another worker. Defaults to 30s.
	AckWait events.Duration `json:"ack_wait,omitempty"`
	// MaxDeliver bounds deliveries of a work message; then its run stops
	// with reason error. Defaults to 5.
	MaxDeliver int `json:"max_deliver,omitempty"`
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
	// RedactObservations redacts the observations this agent's model
	// reads, not only the stored events. Defaults to true.
	RedactObservations *bool `json:"redact_observations,omitempty"`
	// ApprovalTTL is how long an approval of this agent's calls may stay
	// pending before it expires (a tool's own TTL wins). Defaults to 24h.
	ApprovalTTL events.Duration `json:"approval_ttl,omitempty"`
}

// Model chooses and configures a model provider.
type Model struct {
	// Provider: "scripted" (replays recorded decisions).
	Provider string `json:"provider"`
	// Script is the scripted provider's file of decisions, relative to Dir.
	Script string `json:"script,omitempty"`
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
}

// Role lists what principals holding it may do.
type Role struct {
	// Call lists the tools the role may call.
	Call []string `json:"call,omitempty"`
	// Approve lists the tools whose calls the role may approve.
	Approve []string `json:"approve,omitempty"`
	// Args constrains, per tool and argument, the values this role may
	// pass: a call is allowed through this role only if each constrained
	// argument it sets holds one of the listed values.
	Args map[string]map[string][]json.RawMessage `json:"args,omitempty"`
}
