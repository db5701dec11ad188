package seal

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/loopgate/loopgate/events"
)

// ErrShredded: the data key a value was sealed under is gone (deleted
// with Shred, or replaced after that), so the value never opens again.
var ErrShredded = errors.New("seal: the tenant's data key was deleted: the sealed value is unrecoverable")

// record is a tenant's entry in the loopgate_keys bucket.
type record struct {
	// ID names the data key; every Sealed value names the key it is under.
	ID string `json:"id"`
	// KEK is the ID of the key-encryption key that wrapped it.
	KEK string `json:"kek"`
	// Wrapped is the data key, wrapped.
	Wrapped []byte    `json:"wrapped"`
	Created time.Time `json:"created"`
}

// Keyring seals and opens values with tenants' data keys, kept wrapped in
// a KV bucket (journal.BucketKeys), one key per tenant, created on first
// use. It is safe for concurrent use.
//
// Every Seal and Open reads the tenant's entry from the bucket, so a key
// deleted by any process is gone for every process at its next read.
// Unwrapped keys are remembered by id: an id is never reused.
type Keyring struct {
	kv  jetstream.KeyValue
	kek KeyWrapper
	now func() time.Time

	mu   sync.Mutex
	aead map[string]cipher.AEAD // data key id → its cipher
}

// NewKeyring makes a keyring over bucket kv, wrapping data keys with kek.
func NewKeyring(kv jetstream.KeyValue, kek KeyWrapper) *Keyring {
	return &Keyring{kv: kv, kek: kek, now: time.Now, aead: map[string]cipher.AEAD{}}
}

// KEK is the keyring's key-encryption key.
func (k *Keyring) KEK() KeyWrapper { return k.kek }

// Seal encrypts plaintext under tenant's data key, creating the key if the
// tenant has none, and binds it to aad (which Open must be given again).
func (k *Keyring) Seal(ctx context.Context, tenant string, plaintext, aad []byte) (*events.Sealed, error) {
	id, aead, err := k.current(ctx, tenant, true)
	if err != nil {
		return nil, err
	}
	nonce := make([]byte, aead.NonceSize())
	rand.Read(nonce)
	return &events.Sealed{Key: id, Nonce: nonce, Box: aead.Seal(nil, nonce, plaintext, boxAAD(tenant, aad))}, nil
}

// Open decrypts s, sealed for tenant with aad. It returns ErrShredded when
// the tenant's data key is not the one s names (deleted), and another
// error when the bucket cannot be read or the box does not open (altered,
// or moved from another call).
func (k *Keyring) Open(ctx context.Context, tenant string, s *events.Sealed, aad []byte) ([]byte, error) {
	id, aead, err := k.current(ctx, tenant, false)
	if errors.Is(err, jetstream.ErrKeyNotFound) || (err == nil && id != s.Key) {
		return nil, ErrShredded
	}
	if err != nil {
		return nil, err
	}
	if len(s.Nonce) != aead.NonceSize() {
		return nil, fmt.Errorf("seal: nonce has %d bytes, want %d", len(s.Nonce), aead.NonceSize())
	}
	out, err := aead.Open(nil, s.Nonce, s.Box, boxAAD(tenant, aad))
	if err != nil {
		return nil, fmt.Errorf("seal: the sealed value of tenant %s does not open (altered, or not sealed for this call)", tenant)
	}
	return out, nil
}

// Shred deletes tenant's data key and its history from the bucket: every
// value sealed under it becomes unrecoverable. The next Seal for the
// tenant creates a new key.
func (k *Keyring) Shred(ctx context.Context, tenant string) error {
	if err := k.kv.Purge(ctx, tenant); err != nil {
		return fmt.Errorf("seal: shred the data key of tenant %s: %w", tenant, err)
	}
	return nil
}

// current returns tenant's data key, creating it if create is set and the
// tenant has none.
func (k *Keyring) current(ctx context.Context, tenant string, create bool) (string, cipher.AEAD, error) {
	if !events.ValidToken(tenant) {
		return "", nil, fmt.Errorf("seal: tenant %q is not a valid key", tenant)
	}
	for range 3 {
		entry, err := k.kv.Get(ctx, tenant)
		if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, jetstream.ErrKeyDeleted) {
			if !create {
				return "", nil, jetstream.ErrKeyNotFound
			}
			if err := k.create(ctx, tenant); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
				return "", nil, err
			}
			continue // made here or by another process meanwhile: read it
		}
		if err != nil {
			return "", nil, fmt.Errorf("seal: read the data key of tenant %s: %w", tenant, err)
		}
		var rec record
		if err := json.Unmarshal(entry.Value(), &rec); err != nil {
			return "", nil, fmt.Errorf("seal: data key entry of tenant %s: %w", tenant, err)
		}
		aead, err := k.cipher(ctx, tenant, rec)
		return rec.ID, aead, err
	}
	return "", nil, fmt.Errorf("seal: the data key of tenant %s keeps changing", tenant)
}

// cipher unwraps rec's key, once per id.
func (k *Keyring) cipher(ctx context.Context, tenant string, rec record) (cipher.AEAD, error) {
	k.mu.Lock()
	aead, ok := k.aead[rec.ID]
	k.mu.Unlock()
	if ok {
		return aead, nil
	}
	if rec.KEK != k.kek.ID() {
		return nil, fmt.Errorf("seal: the data key of tenant %s is wrapped by key-encryption key %s; this process has %s", tenant, rec.KEK, k.kek.ID())
	}
	key, err := k.kek.Unwrap(ctx, rec.Wrapped, wrapAAD(tenant, rec.ID))
	if err != nil {
		return nil, fmt.Errorf("seal: unwrap the data key of tenant %s: %w", tenant, err)
	}
	aead, err = newGCM(key)
	if err != nil {
		return nil, err
	}
	k.mu.Lock()
	k.aead[rec.ID] = aead
	k.mu.Unlock()
	return aead, nil
}

// create makes tenant's data key; jetstream.ErrKeyExists when another
// process made one first.
func (k *Keyring) create(ctx context.Context, tenant string) error {
	key := make([]byte, KeySize)
	rand.Read(key)
	id := uuid.NewString()
	wrapped, err := k.kek.Wrap(ctx, key, wrapAAD(tenant, id))
	if err != nil {
		return fmt.Errorf("seal: wrap a data key for tenant %s: %w", tenant, err)
	}
	b, err := json.Marshal(record{ID: id, KEK: k.kek.ID(), Wrapped: wrapped, Created: k.now().UTC()})
	if err != nil {
		return err
	}
	if _, err := k.kv.Create(ctx, tenant, b); err != nil {
		if errors.Is(err, jetstream.ErrKeyExists) {
			return err
		}
		return fmt.Errorf("seal: store the data key of tenant %s: %w", tenant, err)
	}
	return nil
}

func wrapAAD(tenant, id string) []byte { return []byte("loopgate data key\x00" + tenant + "\x00" + id) }

func boxAAD(tenant string, aad []byte) []byte {
	return append([]byte("loopgate sealed\x00"+tenant+"\x00"), aad...)
}
