package seal_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/loopgate/loopgate/internal/natstest"
	"github.com/loopgate/loopgate/journal"
	"github.com/loopgate/loopgate/seal"
)

type bundle struct {
	env *natstest.Env
	kek *seal.LocalKey
	kr  *seal.Keyring
}

func setup(t testing.TB) bundle {
	t.Helper()
	env := natstest.Start(t)
	kv, err := env.JS.KeyValue(t.Context(), journal.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	key, err := seal.ParseKey([]byte(seal.NewKeyText()))
	if err != nil {
		t.Fatal(err)
	}
	kek, err := seal.NewLocalKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{env: env, kek: kek, kr: seal.NewKeyring(kv, kek)}
}

func TestASealedValueOpensOnlyForItsTenantAndCall(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	plain := []byte(`{"reason":"call jane@example.org at +49 30 12345678"}`)
	s, err := b.kr.Seal(ctx, "cityops", plain, []byte("run-1\x00c1"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(s.Box, []byte("jane")) {
		t.Fatal("the box holds the value in clear")
	}
	got, err := b.kr.Open(ctx, "cityops", s, []byte("run-1\x00c1"))
	if err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("Open = %q, %v; want %q", got, err, plain)
	}
	// Another process, with the same key-encryption key, opens it too.
	kv, err := b.env.JS.KeyValue(ctx, journal.BucketKeys)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := seal.NewKeyring(kv, b.kek).Open(ctx, "cityops", s, []byte("run-1\x00c1")); err != nil || !bytes.Equal(got, plain) {
		t.Fatalf("another keyring: Open = %q, %v", got, err)
	}
	// Moved to another call, or to another tenant, it does not open.
	if _, err := b.kr.Open(ctx, "cityops", s, []byte("run-1\x00c2")); err == nil {
		t.Error("the box opened for another call")
	}
	if _, err := b.kr.Open(ctx, "other", s, []byte("run-1\x00c1")); err == nil {
		t.Error("the box opened for another tenant")
	}
	// Altered, it does not open.
	bad := *s
	bad.Box = bytes.Clone(s.Box)
	bad.Box[0] ^= 1
	if _, err := b.kr.Open(ctx, "cityops", &bad, []byte("run-1\x00c1")); err == nil || errors.Is(err, seal.ErrShredded) {
		t.Errorf("altered box: err %v, want a refusal that is not ErrShredded", err)
	}
}

func TestShreddingMakesSealedValuesUnrecoverable(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	s, err := b.kr.Seal(ctx, "cityops", []byte(`"secret"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	other, err := b.kr.Seal(ctx, "parks", []byte(`"kept"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := b.kr.Shred(ctx, "cityops"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.kr.Open(ctx, "cityops", s, nil); !errors.Is(err, seal.ErrShredded) {
		t.Fatalf("after shredding: err %v, want ErrShredded", err)
	}
	// A new key for new values; the old value stays lost under it.
	s2, err := b.kr.Seal(ctx, "cityops", []byte(`"new"`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s2.Key == s.Key {
		t.Fatal("the new data key reuses the shredded key's id")
	}
	if _, err := b.kr.Open(ctx, "cityops", s, nil); !errors.Is(err, seal.ErrShredded) {
		t.Fatalf("old value under the new key: err %v, want ErrShredded", err)
	}
	if got, err := b.kr.Open(ctx, "cityops", s2, nil); err != nil || string(got) != `"new"` {
		t.Fatalf("new value: %q, %v", got, err)
	}
	// Other tenants' keys are untouched.
	if got, err := b.kr.Open(ctx, "parks", other, nil); err != nil || string(got) != `"kept"` {
		t.Fatalf("other tenant: %q, %v", got, err)
	}
	// The bucket holds the wrapped key only, never the key.
	kv, _ := b.env.JS.KeyValue(ctx, journal.BucketKeys)
	e, err := kv.Get(ctx, "parks")
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(e.Value(), &rec); err != nil {
		t.Fatal(err)
	}
	if rec["kek"] != b.kek.ID() || rec["wrapped"] == "" {
		t.Errorf("entry %s: want kek %s and a wrapped key", e.Value(), b.kek.ID())
	}
}

func TestAnotherKeyEncryptionKeyCannotOpen(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	s, err := b.kr.Seal(ctx, "cityops", []byte(`1`), nil)
	if err != nil {
		t.Fatal(err)
	}
	key, _ := seal.ParseKey([]byte(seal.NewKeyText()))
	wrong, _ := seal.NewLocalKey(key)
	kv, _ := b.env.JS.KeyValue(ctx, journal.BucketKeys)
	_, err = seal.NewKeyring(kv, wrong).Open(ctx, "cityops", s, nil)
	if err == nil || errors.Is(err, seal.ErrShredded) || !strings.Contains(err.Error(), b.kek.ID()) {
		t.Fatalf("wrong key-encryption key: err %v, want a refusal naming the key the tenant's key is wrapped by", err)
	}
}

func TestConcurrentFirstSealsShareOneKey(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := t.Context()
	var wg sync.WaitGroup
	keys := make([]string, 8)
	for i := range keys {
		kv, _ := b.env.JS.KeyValue(ctx, journal.BucketKeys)
		kr := seal.NewKeyring(kv, b.kek) // a process each
		wg.Go(func() {
			s, err := kr.Seal(ctx, "cityops", []byte(`1`), nil)
			if err != nil {
				t.Error(err)
				return
			}
			keys[i] = s.Key
		})
	}
	wg.Wait()
	for _, k := range keys {
		if k != keys[0] {
			t.Fatalf("keys %v: want one data key for the tenant", keys)
		}
	}
}

func TestParseKey(t *testing.T) {
	t.Parallel()
	hex := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		given   string
		wantErr bool
	}{
		{given: hex},
		{given: "# demo key: never use in production\n" + seal.NewKeyText() + "\n"},
		{given: strings.Repeat("A", 43)}, // raw base64 of 32 bytes
		{given: "c2hvcnQ=", wantErr: true},
		{given: "not a key", wantErr: true},
		{given: "", wantErr: true},
	} {
		k, err := seal.ParseKey([]byte(tc.given))
		if (err != nil) != tc.wantErr {
			t.Errorf("ParseKey(%q) = %x, %v; wantErr %v", tc.given, k, err, tc.wantErr)
		}
		if err == nil && len(k) != seal.KeySize {
			t.Errorf("ParseKey(%q): %d bytes", tc.given, len(k))
		}
	}
}

func benchKeyring(b *testing.B) *seal.Keyring { return setup(b).kr }
