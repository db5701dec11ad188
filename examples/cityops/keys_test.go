package cityops

import (
	"errors"
	"io/fs"
	"os"
	"slices"
	"testing"

	"github.com/loopgate/loopgate/approvals"
	"github.com/loopgate/loopgate/config"
)

// The example requires signed approvals, so every approver in both of its
// configs has a public key, and the seed embedded for them in Files (the
// demo signs with it) is the one in keys/ and matches that key.
func TestEveryExampleApproverHasAnEmbeddedKeyMatchingThePolicy(t *testing.T) {
	t.Parallel()
	local, err := config.Load(Files, ConfigFile)
	if err != nil {
		t.Fatal(err)
	}
	remote, err := config.LoadFile("remote.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for name, cfg := range map[string]*config.Config{ConfigFile: local, "remote.yaml": remote} {
		if !cfg.Policy.RequireSignatures {
			t.Errorf("%s: policy.require_signatures is off: an unsigned approval would release a write", name)
		}
		var ids []string
		for id, a := range cfg.Policy.Approvers {
			ids = append(ids, id)
			seed, err := ApproverSeed(id)
			if err != nil {
				t.Errorf("%s: approver %s: %v", name, id, err)
				continue
			}
			onDisk, err := os.ReadFile(ApproverKeyFile(id))
			if err != nil || string(onDisk) != string(seed) {
				t.Errorf("%s: approver %s: the embedded seed is not %s (%v)", name, id, ApproverKeyFile(id), err)
			}
			kp, err := approvals.ParseSeed(seed)
			if err != nil {
				t.Errorf("%s: approver %s: %v", name, id, err)
				continue
			}
			if pub, _ := kp.PublicKey(); pub != a.PublicKey {
				t.Errorf("%s: approver %s: public_key %s, but the example seed's is %s", name, id, a.PublicKey, pub)
			}
		}
		slices.Sort(ids)
		if want := []string{"dev@cityops", "intern@cityops", "supervisor@cityops"}; !slices.Equal(ids, want) {
			t.Errorf("%s: approvers %v, want %v", name, ids, want)
		}
	}
}

func TestApproverSeedOfAnUnknownApproverIsNotExist(t *testing.T) {
	t.Parallel()
	for _, id := range []string{"nobody@cityops", "", "../loopgate", "keys/../supervisor@cityops", `a\b`} {
		if b, err := ApproverSeed(id); !errors.Is(err, fs.ErrNotExist) || b != nil {
			t.Errorf("ApproverSeed(%q) = %d bytes, %v; want fs.ErrNotExist", id, len(b), err)
		}
	}
}
