package config_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nkeys"

	"github.com/loopgate/loopgate/config"
)

func newUserKey(t *testing.T) (pub, seed string) {
	t.Helper()
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	p, _ := kp.PublicKey()
	s, _ := kp.Seed()
	return p, string(s)
}

func withApprovers(approvers string) string {
	return validYAML + "  approvers:\n" + approvers
}

func TestLoadReadsSignaturePolicy(t *testing.T) {
	t.Parallel()
	pub, _ := newUserKey(t)
	c, err := config.Load(files(withApprovers(
		"    boss: {roles: [supervisor], public_key: "+pub+"}\n"+
			"  require_signatures: true\n"+
			"  approval_max_age: 90s\n")), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Policy.RequireSignatures || c.Policy.ApprovalMaxAge.D() != 90*time.Second || c.Policy.Approvers["boss"].PublicKey != pub {
		t.Fatalf("policy = %+v", c.Policy)
	}

	c, err = config.Load(files(withApprovers("    boss: {roles: [supervisor]}\n")), "loopgate.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if c.Policy.RequireSignatures || c.Policy.ApprovalMaxAge != config.DefaultApprovalMaxAge || config.DefaultApprovalMaxAge.D() != 5*time.Minute {
		t.Fatalf("defaults: require_signatures %v, approval_max_age %s", c.Policy.RequireSignatures, c.Policy.ApprovalMaxAge.D())
	}
}

func TestLoadRejectsBadSignaturePolicy(t *testing.T) {
	t.Parallel()
	pub, seed := newUserKey(t)
	account, _ := nkeys.CreateAccount()
	accountPub, _ := account.PublicKey()
	tests := []struct {
		name    string
		given   string
		wantErr string
	}{
		{
			name:    "a key that is not an nkey",
			given:   withApprovers("    boss: {roles: [supervisor], public_key: UNOTAKEY}\n"),
			wantErr: "/policy/approvers/boss/public_key: is not an nkey user public key",
		},
		{
			name:    "an account key",
			given:   withApprovers("    boss: {roles: [supervisor], public_key: " + accountPub + "}\n"),
			wantErr: "/policy/approvers/boss/public_key: is not an nkey user public key",
		},
		{
			name:    "a seed pasted as the key",
			given:   withApprovers("    boss: {roles: [supervisor], public_key: " + seed + "}\n"),
			wantErr: "/policy/approvers/boss/public_key: is a seed, a private key",
		},
		{
			name:    "a key damaged by one character",
			given:   withApprovers("    boss: {roles: [supervisor], public_key: " + pub[:len(pub)-1] + flipChar(pub[len(pub)-1]) + "}\n"),
			wantErr: "/policy/approvers/boss/public_key: is not an nkey user public key",
		},
		{
			name: "one key for two approvers",
			given: withApprovers("    boss: {roles: [supervisor], public_key: " + pub + "}\n" +
				"    deputy: {roles: [supervisor], public_key: " + pub + "}\n"),
			wantErr: "/policy/approvers/deputy/public_key: is also the key of approver boss",
		},
		{
			name:    "signatures required, an approver without a key",
			given:   withApprovers("    boss: {roles: [supervisor]}\n  require_signatures: true\n"),
			wantErr: "/policy/approvers/boss/public_key: is required: /policy/require_signatures is set",
		},
		{
			name:    "bad max age",
			given:   withApprovers("    boss: {roles: [supervisor]}\n  approval_max_age: five minutes\n"),
			wantErr: "/policy/approval_max_age: must match the pattern",
		},
		{
			name:    "require_signatures not a bool",
			given:   withApprovers("    boss: {roles: [supervisor]}\n  require_signatures: sometimes\n"),
			wantErr: "/policy/require_signatures: must be boolean",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := config.Load(files(tt.given), "loopgate.yaml")
			if !errors.Is(err, config.ErrInvalid) {
				t.Fatalf("Load() error = %v, want ErrInvalid", err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Load() error = %q\nwant it to contain %q", err, tt.wantErr)
			}
			if strings.Contains(err.Error(), seed) {
				t.Errorf("the error echoes a seed: %q", err)
			}
		})
	}
}

func flipChar(c byte) string {
	if c == 'A' {
		return "B"
	}
	return "A"
}
