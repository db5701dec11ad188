package seal

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
)

// KeySize is the size of every key here: AES-256.
const KeySize = 32

// EnvKey is the environment variable a key-encryption key may be given
// in, base64 or hex, when no key file is configured.
const EnvKey = "LOOPGATE_SEAL_KEY"

// KeyWrapper wraps and unwraps tenants' data keys: the key-encryption key.
// Implementations are safe for concurrent use. A KMS client fits here:
// Wrap and Unwrap are its encrypt and decrypt calls, ID its key's name.
type KeyWrapper interface {
	// ID names the key-encryption key. It is stored beside each key it
	// wraps and never reveals the key.
	ID() string
	// Wrap encrypts dataKey, binding it to aad.
	Wrap(ctx context.Context, dataKey, aad []byte) ([]byte, error)
	// Unwrap decrypts what Wrap returned for the same aad.
	Unwrap(ctx context.Context, wrapped, aad []byte) ([]byte, error)
}

// LocalKey is a KeyWrapper holding a 256-bit key in memory.
type LocalKey struct {
	id   string
	aead cipher.AEAD
}

// NewLocalKey makes a LocalKey of a 32-byte key.
func NewLocalKey(key []byte) (*LocalKey, error) {
	if len(key) != KeySize {
		return nil, fmt.Errorf("seal: key-encryption key has %d bytes, want %d", len(key), KeySize)
	}
	aead, err := newGCM(key)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(key)
	return &LocalKey{id: "local:" + hex.EncodeToString(sum[:8]), aead: aead}, nil
}

// ParseKey reads a 32-byte key written as base64 (standard or URL
// alphabet, padded or not) or as 64 hex digits; surrounding white space
// and lines starting with # are ignored, so a key file can say what it is.
func ParseKey(text []byte) ([]byte, error) {
	var body []byte
	for line := range bytes.Lines(text) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		body = append(body, line...)
	}
	s := string(body)
	if len(s) == 2*KeySize {
		if k, err := hex.DecodeString(s); err == nil {
			return k, nil
		}
	}
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		if k, err := enc.DecodeString(s); err == nil {
			if len(k) != KeySize {
				return nil, fmt.Errorf("key has %d bytes, want %d", len(k), KeySize)
			}
			return k, nil
		}
	}
	return nil, errors.New("key is neither base64 nor 64 hex digits")
}

// LoadKeyFile reads a LocalKey from a file (see ParseKey).
func LoadKeyFile(path string) (*LocalKey, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("seal: read key file: %w", err)
	}
	k, err := ParseKey(b)
	if err != nil {
		return nil, fmt.Errorf("seal: key file %s: %w", path, err)
	}
	return NewLocalKey(k)
}

// NewKeyText returns a new random key written as ParseKey reads it.
func NewKeyText() string {
	k := make([]byte, KeySize)
	rand.Read(k)
	return base64.StdEncoding.EncodeToString(k)
}

// ID implements KeyWrapper.
func (k *LocalKey) ID() string { return k.id }

// Wrap implements KeyWrapper.
func (k *LocalKey) Wrap(_ context.Context, dataKey, aad []byte) ([]byte, error) {
	return sealBytes(k.aead, dataKey, aad), nil
}

// Unwrap implements KeyWrapper.
func (k *LocalKey) Unwrap(_ context.Context, wrapped, aad []byte) ([]byte, error) {
	return openBytes(k.aead, wrapped, aad)
}

func newGCM(key []byte) (cipher.AEAD, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("seal: %w", err)
	}
	return cipher.NewGCM(block)
}

// sealBytes returns nonce || ciphertext.
func sealBytes(aead cipher.AEAD, plaintext, aad []byte) []byte {
	nonce := make([]byte, aead.NonceSize(), aead.NonceSize()+len(plaintext)+aead.Overhead())
	rand.Read(nonce)
	return aead.Seal(nonce, nonce, plaintext, aad)
}

// openBytes opens what sealBytes returned.
func openBytes(aead cipher.AEAD, box, aad []byte) ([]byte, error) {
	n := aead.NonceSize()
	if len(box) < n+aead.Overhead() {
		return nil, errors.New("seal: box too short")
	}
	out, err := aead.Open(nil, box[:n], box[n:], aad)
	if err != nil {
		return nil, errors.New("seal: box does not open with this key")
	}
	return out, nil
}

// KeyFromEnv reads a LocalKey from the LOOPGATE_SEAL_KEY environment
// variable (see ParseKey); nil, nil when it is unset or empty.
func KeyFromEnv() (*LocalKey, error) {
	text := os.Getenv(EnvKey)
	if text == "" {
		return nil, nil
	}
	k, err := ParseKey([]byte(text))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvKey, err)
	}
	return NewLocalKey(k)
}
