package approvals

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/tools"
)

// Signed approvals.
//
// An approver signs an approval with their user nkey (ed25519; public key
// "U…", seed "SU…") over its signing payload: the RFC 8785 canonical JSON
// of this object, every member always present, all strings:
//
//	{
//	  "approver":  approver.id,
//	  "args_hash": args_hash,
//	  "call_id":   call_id,
//	  "decision":  decision,
//	  "reason":    reason, or "" when the message has none,
//	  "run_id":    run_id,
//	  "time":      signed_at, character for character as in the message
//	}
//
// canonical JSON being the members sorted by name, no whitespace, strings
// with only the escapes RFC 8785 requires. The message then carries
// signed_at (an RFC 3339 time: when it was signed) and signature (the
// unpadded base64url encoding of the 64-byte ed25519 signature of the
// payload's bytes). Every field that decides anything is signed: a changed
// hash, decision, approver, reason or time, or the same signature on
// another run or call, does not verify. The tenant is not a member: the run
// id is derived from it.
//
// Use these keys for approvals only. NATS clients sign the server's nonce
// with the key they connect with, so a key that is also a NATS credential
// could be made to sign a payload of a malicious server's choosing.

// Default signature window, see Policy.MaxAge and MaxClockSkew.
const (
	// DefaultMaxAge is how long before it reached the approvals stream an
	// approval may have been signed, when the policy does not say.
	DefaultMaxAge = 5 * time.Minute
	// MaxClockSkew is how far in the future signed_at may be, for approvers
	// whose clocks run a little ahead of the NATS server's.
	MaxClockSkew = 30 * time.Second
)

// Signature errors. VerifySignature's errors wrap one of them.
var (
	// ErrUnsigned: the message has no signature (or no signed_at).
	ErrUnsigned = errors.New("approval is not signed")
	// ErrBadSignature: the signature is malformed, the key is not a user
	// public key, or the signature does not verify.
	ErrBadSignature = errors.New("approval signature does not verify")
)

// payload is the signed object; its JSON names are the payload's members.
type payload struct {
	RunID    string `json:"run_id"`
	CallID   string `json:"call_id"`
	ArgsHash string `json:"args_hash"`
	Decision string `json:"decision"`
	Approver string `json:"approver"`
	Reason   string `json:"reason"`
	Time     string `json:"time"`
}

// SigningPayload returns the bytes an approver signs for m (see the
// package's signed approvals section): the canonical JSON of its run_id,
// call_id, args_hash, decision, approver id, reason and signed_at. It
// fails only when a field is not valid UTF-8.
func SigningPayload(m Message) ([]byte, error) {
	// encoding/json would replace invalid UTF-8 silently; a signature over
	// the replaced text would not be a signature over what was sent.
	for _, s := range []string{m.RunID, m.CallID, m.ArgsHash, string(m.Decision), m.Approver.ID, m.Reason, m.SignedAt} {
		if !utf8.ValidString(s) {
			return nil, fmt.Errorf("approval signing payload: %w: a field is not valid UTF-8", tools.ErrInvalidJSON)
		}
	}
	raw, err := json.Marshal(payload{
		RunID:    m.RunID,
		CallID:   m.CallID,
		ArgsHash: m.ArgsHash,
		Decision: string(m.Decision),
		Approver: m.Approver.ID,
		Reason:   m.Reason,
		Time:     m.SignedAt,
	})
	if err != nil {
		return nil, fmt.Errorf("approval signing payload: %w", err)
	}
	out, err := tools.Canonical(raw)
	if err != nil {
		return nil, fmt.Errorf("approval signing payload: %w", err)
	}
	return out, nil
}

// SignedAtFormat is how Sign writes signed_at: RFC 3339 in UTC with
// milliseconds. Any RFC 3339 time verifies; the payload holds signed_at
// as written.
const SignedAtFormat = "2006-01-02T15:04:05.000Z07:00"

// Sign signs m as of at with kp, a user key pair (seed "SU…"): it sets
// m.SignedAt to at in SignedAtFormat and m.Signature to the signature of
// m's signing payload. Any change to m's fields afterwards invalidates it.
func Sign(m *Message, kp nkeys.KeyPair, at time.Time) error {
	if err := checkUserKey(kp); err != nil {
		return err
	}
	m.SignedAt = at.UTC().Format(SignedAtFormat)
	m.Signature = ""
	msg, err := SigningPayload(*m)
	if err != nil {
		return err
	}
	sig, err := kp.Sign(msg)
	if err != nil {
		return fmt.Errorf("sign approval of run %s call %s: %w", m.RunID, m.CallID, err)
	}
	m.Signature = base64.RawURLEncoding.EncodeToString(sig)
	return nil
}

// VerifySignature checks m's signature against publicKey, a user nkey
// ("U…"). It returns nil when the signature is valid for m's signing
// payload; otherwise an error wrapping ErrUnsigned or ErrBadSignature. It
// does not judge signed_at's age (Check does).
func VerifySignature(m Message, publicKey string) error {
	if m.Signature == "" || m.SignedAt == "" {
		return ErrUnsigned
	}
	if !nkeys.IsValidPublicUserKey(publicKey) {
		return fmt.Errorf("%w: %q is not a user public key", ErrBadSignature, publicKey)
	}
	pub, err := nkeys.FromPublicKey(publicKey)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	sig, err := base64.RawURLEncoding.Strict().DecodeString(m.Signature)
	if err != nil {
		return fmt.Errorf("%w: signature is not unpadded base64url", ErrBadSignature)
	}
	msg, err := SigningPayload(m)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if err := pub.Verify(msg, sig); err != nil {
		return fmt.Errorf("%w: not signed by %s", ErrBadSignature, publicKey)
	}
	return nil
}

// SignedTime parses m.SignedAt (RFC 3339).
func (m Message) SignedTime() (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, m.SignedAt)
	if err != nil {
		return time.Time{}, fmt.Errorf("signed_at %q is not an RFC 3339 time", m.SignedAt)
	}
	return t, nil
}

// ParseSeed reads a user key pair from the contents of a key file: a
// seed "SU…" on a line of its own (what loopgate keys new writes), or a
// NATS credentials file holding one.
func ParseSeed(contents []byte) (nkeys.KeyPair, error) {
	kp, err := nkeys.ParseDecoratedUserNKey([]byte(strings.TrimSpace(strings.ReplaceAll(string(contents), "\r", ""))))
	if err != nil {
		return nil, fmt.Errorf("not a user nkey seed (SU…): %w", err)
	}
	return kp, nil
}

// authenticate applies the signature rules of p to msg: a signature,
// when present, must verify against the approver's configured key and be
// fresh; when p requires signatures it must be present. It returns "" or a
// rejection class and detail.
func authenticate(msg Message, p Policy, now time.Time) (class, detail string) {
	signed := msg.Signature != "" || msg.SignedAt != ""
	switch {
	case !signed && p.RequireSignature:
		return RejectUnsigned, "the policy requires signed approvals (policy.require_signatures) and this one has no signature"
	case !signed:
		return "", ""
	case p.PublicKey == "" && !p.Known:
		return RejectBadSignature, msg.Approver.ID + " is not an approver in the policy: no key to verify the signature against"
	case p.PublicKey == "":
		return RejectBadSignature, msg.Approver.ID + " has no public_key in the policy: the signature cannot be verified"
	}
	if err := VerifySignature(msg, p.PublicKey); err != nil {
		detail := "the signature does not verify against " + msg.Approver.ID + "'s public key " + p.PublicKey
		if errors.Is(err, ErrUnsigned) {
			detail = "signature and signed_at come together: the message has only one"
		}
		return RejectBadSignature, detail
	}
	at, err := msg.SignedTime()
	if err != nil {
		return RejectBadSignature, err.Error()
	}
	ref := p.arrived(now)
	maxAge := p.MaxAge
	if maxAge <= 0 {
		maxAge = DefaultMaxAge
	}
	switch age := ref.Sub(at); {
	case age > maxAge:
		return RejectStale, fmt.Sprintf("signed at %s, %s before it arrived: over the %s window (policy.approval_max_age); a replay, or a message held back",
			msg.SignedAt, age.Round(time.Second), maxAge)
	case -age > MaxClockSkew:
		return RejectStale, fmt.Sprintf("signed at %s, %s after it arrived: more than the %s clock skew allowed", msg.SignedAt, (-age).Round(time.Second), MaxClockSkew)
	}
	return "", ""
}

func checkUserKey(kp nkeys.KeyPair) error {
	if kp == nil {
		return fmt.Errorf("%w: no key pair", ErrBadSignature)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return fmt.Errorf("sign approval: %w", err)
	}
	if !nkeys.IsValidPublicUserKey(pub) {
		return fmt.Errorf("sign approval: %s is not a user key (want a seed starting SU)", pub)
	}
	return nil
}
