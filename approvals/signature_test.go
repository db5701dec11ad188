package approvals_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/approvals"
)

// fixedKey is a user key pair from a fixed seed, so the test vector below
// is stable.
func fixedKey(t testing.TB, b byte) nkeys.KeyPair {
	t.Helper()
	kp, err := nkeys.FromRawSeed(nkeys.PrefixByteUser, bytes.Repeat([]byte{b}, 32))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func publicKey(t testing.TB, kp nkeys.KeyPair) string {
	t.Helper()
	pub, err := kp.PublicKey()
	if err != nil {
		t.Fatal(err)
	}
	return pub
}

var signedAt = time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)

func unsigned() approvals.Message {
	return approvals.Message{
		RunID:    "0b6e3f0e-8f3a-5d7c-9a51-7e2b8f0c1d2e",
		CallID:   "s3c1",
		ArgsHash: "sha256:20730071c002a1f1d1e4e2b9f3c5a7d9e1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1",
		Decision: approvals.Approve,
		Approver: approvals.Approver{ID: "supervisor@cityops"},
		Reason:   "ok, escalate",
	}
}

func signed(t testing.TB, kp nkeys.KeyPair) approvals.Message {
	t.Helper()
	m := unsigned()
	if err := approvals.Sign(&m, kp, signedAt); err != nil {
		t.Fatal(err)
	}
	return m
}

// The signing payload is a contract with every approver's client, in any
// language: these exact bytes, and this exact signature for this seed.
func TestSigningPayloadIsTheCanonicalApprovalAsDocumented(t *testing.T) {
	t.Parallel()
	m := signed(t, fixedKey(t, 7))
	got, err := approvals.SigningPayload(m)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"approver":"supervisor@cityops",` +
		`"args_hash":"sha256:20730071c002a1f1d1e4e2b9f3c5a7d9e1f3a5c7e9b1d3f5a7c9e1b3d5f7a9c1",` +
		`"call_id":"s3c1","decision":"approve","reason":"ok, escalate",` +
		`"run_id":"0b6e3f0e-8f3a-5d7c-9a51-7e2b8f0c1d2e","time":"2026-11-30T10:00:00.000Z"}`
	if string(got) != want {
		t.Fatalf("signing payload\n got  %s\n want %s", got, want)
	}
	if m.SignedAt != "2026-11-30T10:00:00.000Z" {
		t.Fatalf("signed_at = %q", m.SignedAt)
	}
	// Cross-checked with Python's cryptography (Ed25519PrivateKey of the
	// same 32 bytes, urlsafe_b64encode without padding).
	const wantSig = "JufpS2rwZe-N3UpU406pNKGLkVvdRhOFGMxNdkybe_nOFO_FbnR-mv2k7F5ll_tqDERsyInDI1vLqffC64SzDA"
	if m.Signature != wantSig {
		t.Fatalf("signature = %q, want %q (ed25519 is deterministic: the payload or the encoding changed)", m.Signature, wantSig)
	}

	// No reason is signed as "": stripping a reason off a message breaks
	// its signature like changing it does.
	m2 := unsigned()
	m2.Reason = ""
	m2.SignedAt = "2026-11-30T11:00:00+01:00"
	got, _ = approvals.SigningPayload(m2)
	if !strings.Contains(string(got), `"reason":"","run_id"`) || !strings.HasSuffix(string(got), `"time":"2026-11-30T11:00:00+01:00"}`) {
		t.Fatalf("payload without a reason, signed_at as written: %s", got)
	}
}

func TestSignedApprovalVerifiesAndEveryTamperedFieldDoesNot(t *testing.T) {
	t.Parallel()
	kp := fixedKey(t, 7)
	pub := publicKey(t, kp)
	m := signed(t, kp)
	if err := approvals.VerifySignature(m, pub); err != nil {
		t.Fatalf("round trip: %v", err)
	}
	cases := map[string]func(*approvals.Message){
		"args_hash": func(m *approvals.Message) { m.ArgsHash = "sha256:" + strings.Repeat("0", 64) },
		"decision":  func(m *approvals.Message) { m.Decision = approvals.Deny },
		"approver":  func(m *approvals.Message) { m.Approver.ID = "dev@cityops" },
		"time":      func(m *approvals.Message) { m.SignedAt = "2026-11-30T10:04:00.000Z" },
		"same time, other form": func(m *approvals.Message) {
			m.SignedAt = "2026-11-30T10:00:00Z" // signed as written, not as parsed
		},
		"reason":         func(m *approvals.Message) { m.Reason = "ok, escalate everything" },
		"reason removed": func(m *approvals.Message) { m.Reason = "" },
		"run_id":         func(m *approvals.Message) { m.RunID = "another-run" },
		"call_id":        func(m *approvals.Message) { m.CallID = "s4c1" },
		"signature bit":  func(m *approvals.Message) { m.Signature = flip(m.Signature) },
		"signature padded": func(m *approvals.Message) {
			m.Signature += "=="
		},
	}
	for name, tamper := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			bad := m
			tamper(&bad)
			err := approvals.VerifySignature(bad, pub)
			if !errors.Is(err, approvals.ErrBadSignature) {
				t.Fatalf("tampered %s: err = %v, want ErrBadSignature", name, err)
			}
		})
	}
}

func flip(sig string) string {
	b := []byte(sig)
	if b[10] == 'A' {
		b[10] = 'B'
	} else {
		b[10] = 'A'
	}
	return string(b)
}

func TestVerifySignatureRefusesWrongKeysAndMissingParts(t *testing.T) {
	t.Parallel()
	kp := fixedKey(t, 7)
	m := signed(t, kp)
	other := publicKey(t, fixedKey(t, 8))
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	accountPub := publicKey(t, account)
	seed, _ := kp.Seed()
	cases := []struct {
		name    string
		msg     approvals.Message
		key     string
		wantErr error
	}{
		{"another approver's key", m, other, approvals.ErrBadSignature},
		{"an account key, not a user key", m, accountPub, approvals.ErrBadSignature},
		{"a seed instead of a public key", m, string(seed), approvals.ErrBadSignature},
		{"no key", m, "", approvals.ErrBadSignature},
		{"no signature", unsigned(), publicKey(t, kp), approvals.ErrUnsigned},
		{"signed_at without signature", func() approvals.Message { u := m; u.Signature = ""; return u }(), publicKey(t, kp), approvals.ErrUnsigned},
		{"signature without signed_at", func() approvals.Message { u := m; u.SignedAt = ""; return u }(), publicKey(t, kp), approvals.ErrUnsigned},
		{"signature not base64url", func() approvals.Message { u := m; u.Signature = strings.Repeat("+", 86); return u }(), publicKey(t, kp), approvals.ErrBadSignature},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			if err := approvals.VerifySignature(c.msg, c.key); !errors.Is(err, c.wantErr) {
				t.Fatalf("err = %v, want %v", err, c.wantErr)
			}
		})
	}
}

func TestSignRefusesKeysThatAreNotUserKeys(t *testing.T) {
	t.Parallel()
	account, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	m := unsigned()
	if err := approvals.Sign(&m, account, signedAt); err == nil {
		t.Fatal("signed with an account key")
	}
	if m.Signature != "" {
		t.Fatal("a refused signing left a signature")
	}
	pub, _ := nkeys.FromPublicKey(publicKey(t, fixedKey(t, 7)))
	if err := approvals.Sign(&m, pub, signedAt); err == nil {
		t.Fatal("signed with a public key only")
	}
}

func TestCheckAuthenticatesBeforeItJudges(t *testing.T) {
	t.Parallel()
	kp := fixedKey(t, 7)
	pub := publicKey(t, kp)
	received := signedAt.Add(time.Minute)
	late := signedAt.Add(time.Hour) // a worker late to the message: signed_at is judged against received
	pending := approvals.Entry{
		State: approvals.StatePending, Kind: approvals.KindApproval, Round: 1, Tool: "draft_escalation",
		ArgsHash: unsigned().ArgsHash, Principal: "dev@cityops", ExpiresAt: late.Add(time.Hour),
	}
	policy := approvals.Policy{Known: true, MayApprove: true, PublicKey: pub, MaxAge: 5 * time.Minute, Received: received}
	required := policy
	required.RequireSignature = true

	at := func(d time.Duration) approvals.Message {
		m := unsigned()
		if err := approvals.Sign(&m, kp, signedAt.Add(d)); err != nil {
			t.Fatal(err)
		}
		return m
	}
	cases := []struct {
		name string
		msg  approvals.Message
		e    approvals.Entry
		p    approvals.Policy
		want string
	}{
		{"signed, required", signed(t, kp), pending, required, ""},
		{"signed, not required", signed(t, kp), pending, policy, ""},
		{"unsigned, not required", unsigned(), pending, policy, ""},
		{"unsigned, required", unsigned(), pending, required, approvals.RejectUnsigned},
		{"unsigned, required, no key configured", unsigned(), pending, func() approvals.Policy { p := required; p.PublicKey = ""; return p }(), approvals.RejectUnsigned},
		{"signed by another key", signed(t, fixedKey(t, 8)), pending, required, approvals.RejectBadSignature},
		{"signed by another key, not required", signed(t, fixedKey(t, 8)), pending, policy, approvals.RejectBadSignature},
		{"signed, approver has no key", signed(t, kp), pending, func() approvals.Policy { p := policy; p.PublicKey = ""; return p }(), approvals.RejectBadSignature},
		{"signed, approver unknown", signed(t, kp), pending, approvals.Policy{}, approvals.RejectBadSignature},
		{"tampered hash", func() approvals.Message {
			m := signed(t, kp)
			m.ArgsHash = "sha256:" + strings.Repeat("1", 64)
			return m
		}(), pending, required, approvals.RejectBadSignature},
		{"tampered decision", func() approvals.Message { m := signed(t, kp); m.Decision = approvals.Deny; return m }(), pending, required, approvals.RejectBadSignature},
		{"tampered approver", func() approvals.Message { m := signed(t, kp); m.Approver.ID = "dev@cityops"; return m }(), pending, required, approvals.RejectBadSignature},
		{"tampered time", func() approvals.Message { m := signed(t, kp); m.SignedAt = "2026-11-30T10:00:59.000Z"; return m }(), pending, required, approvals.RejectBadSignature},
		{"signed 6m before it arrived: a replay", at(-5 * time.Minute), pending, required, approvals.RejectStale},
		{"signed 5m before it arrived", at(-4 * time.Minute), pending, required, ""},
		{"signed 20s after it arrived: skew", at(time.Minute + 20*time.Second), pending, required, ""},
		{"signed 2m after it arrived", at(3 * time.Minute), pending, required, approvals.RejectStale},
		{"stale, not required", at(-time.Hour), pending, policy, approvals.RejectStale},
		{"max age defaults to 5m", at(-5 * time.Minute), pending, func() approvals.Policy { p := required; p.MaxAge = 0; return p }(), approvals.RejectStale},
		{"no receipt time: judged against now", signed(t, kp), pending, func() approvals.Policy { p := required; p.Received = time.Time{}; return p }(), approvals.RejectStale},
		{"a duplicate is not_pending, signed or not", unsigned(), func() approvals.Entry {
			e := pending
			e.State, e.Decision, e.DecidedBy = "approved", approvals.Approve, "supervisor@cityops"
			return e
		}(), required, approvals.RejectNotPending},
		{"authenticated, then judged: stale hash", func() approvals.Message {
			m := unsigned()
			m.ArgsHash = "sha256:" + strings.Repeat("2", 64)
			_ = approvals.Sign(&m, kp, signedAt)
			return m
		}(), pending, required, approvals.RejectHashMismatch},
		{"authenticated, then judged: self-approval", func() approvals.Message {
			m := unsigned()
			m.Approver.ID = "dev@cityops"
			_ = approvals.Sign(&m, kp, signedAt)
			return m
		}(), pending, required, approvals.RejectSelf},
		{"unauthenticated claims are not judged", func() approvals.Message {
			m := unsigned()
			m.ArgsHash = "sha256:" + strings.Repeat("2", 64)
			return m
		}(), pending, required, approvals.RejectUnsigned},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			class, detail := approvals.Check(c.msg, c.e, c.p, late)
			if class != c.want {
				t.Fatalf("class = %q (%s), want %q", class, detail, c.want)
			}
			if class != "" && detail == "" {
				t.Fatal("a rejection without a detail")
			}
		})
	}
}

func TestParseSeedReadsKeyFilesAndCredentials(t *testing.T) {
	t.Parallel()
	kp := fixedKey(t, 7)
	seed, _ := kp.Seed()
	pub := publicKey(t, kp)
	account, _ := nkeys.CreateAccount()
	accountSeed, _ := account.Seed()
	creds := "-----BEGIN NATS USER JWT-----\neyJhbGciOi.x.y\n------END NATS USER JWT------\n\n" +
		"-----BEGIN USER NKEY SEED-----\n" + string(seed) + "\n------END USER NKEY SEED------\n"
	cases := []struct {
		name    string
		given   string
		wantErr bool
	}{
		{"a seed and a newline", string(seed) + "\n", false},
		{"CRLF and blanks", "  " + string(seed) + "\r\n\r\n", false},
		{"a credentials file", creds, false},
		{"an account seed", string(accountSeed) + "\n", true},
		{"a public key", pub + "\n", true},
		{"nothing", "", true},
		{"a damaged seed", string(seed[:len(seed)-2]) + "AA\n", true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			got, err := approvals.ParseSeed([]byte(c.given))
			if c.wantErr {
				if err == nil {
					t.Fatal("accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if p := publicKey(t, got); p != pub {
				t.Fatalf("public key %s, want %s", p, pub)
			}
		})
	}
}

// FuzzVerifySignature: whatever an approval message holds, verification
// never panics, and accepts only the untampered signed message.
func FuzzVerifySignature(f *testing.F) {
	kp := fixedKey(f, 7)
	pub := publicKey(f, kp)
	m := signed(f, kp)
	f.Add(m.RunID, m.CallID, m.ArgsHash, string(m.Decision), m.Approver.ID, m.Reason, m.SignedAt, m.Signature)
	f.Add("r", "c", "sha256:", "deny", "x", "\xff", "2026-11-30T10:00:00Z", "AAAA")
	f.Add("", "", "", "", "", "", "", "")
	f.Fuzz(func(t *testing.T, run, call, hash, decision, approver, reason, at, sig string) {
		got := approvals.Message{RunID: run, CallID: call, ArgsHash: hash, Decision: approvals.Decision(decision),
			Approver: approvals.Approver{ID: approver}, Reason: reason, SignedAt: at, Signature: sig}
		err := approvals.VerifySignature(got, pub)
		if err == nil && got != m {
			t.Fatalf("a message that is not the signed one verified: %+v", got)
		}
	})
}
