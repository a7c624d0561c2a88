package secrets

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// KeyFileName is the key's file in the data directory, made with mode 0600 on first use.
const KeyFileName = "secrets.key"

// KeyEnv names the environment variable that gives the key instead of the file: 32 bytes in
// standard base64 (`openssl rand -base64 32`). Daemons sharing a PostgreSQL database need the
// same key.
const KeyEnv = "SANDPIT_SECRETS_KEY"

// Cipher seals and opens secrets' values with AES-256-GCM. Each sealed value is a version
// byte, a random 12-byte nonce and the ciphertext with its tag; the secret's agent and name
// are authenticated with it, so a sealed value copied to another secret's row does not open.
type Cipher struct {
	aead cipher.AEAD
}

// NewCipher returns the Cipher of a 32-byte key.
func NewCipher(key []byte) (*Cipher, error) {
	if len(key) != 32 {
		return nil, fmt.Errorf("the secrets key has %d bytes, not 32", len(key))
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	aead, err := cipher.NewGCM(block)
	if err != nil {
		return nil, err
	}
	return &Cipher{aead: aead}, nil
}

// LoadCipher returns the Cipher of the key that lookup gives as KeyEnv, else of the key in
// dataDir's KeyFileName, which it makes (32 random bytes, mode 0600) when there is none and
// create is true. Errors: a key that is not 32 bytes of base64, a key file readable by others
// than its owner, a missing file when create is false.
func LoadCipher(dataDir string, lookup func(string) (string, bool), create bool) (*Cipher, error) {
	if v, ok := lookup(KeyEnv); ok && v != "" {
		key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(v))
		if err != nil || len(key) != 32 {
			return nil, fmt.Errorf("%s must be 32 bytes in base64 (such as the output of `openssl rand -base64 32`)", KeyEnv)
		}
		return NewCipher(key)
	}
	path := filepath.Join(dataDir, KeyFileName)
	key, err := readKeyFile(path)
	if errors.Is(err, fs.ErrNotExist) && create {
		key = make([]byte, 32)
		_, _ = rand.Read(key)
		if err := writeKeyFile(path, key); err != nil {
			return nil, err
		}
		return NewCipher(key)
	}
	if err != nil {
		return nil, err
	}
	return NewCipher(key)
}

func readKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the secrets key %s has mode %v: others than its owner may read it; `chmod 600 %s`", path, st.Mode().Perm(), path)
	}
	buf := make([]byte, 128)
	n, _ := f.Read(buf)
	key, err := base64.StdEncoding.DecodeString(strings.TrimSpace(string(buf[:n])))
	if err != nil || len(key) != 32 {
		return nil, fmt.Errorf("the secrets key %s does not hold 32 bytes in base64; restore it from a backup (secrets sealed with another key cannot be opened)", path)
	}
	return key, nil
}

func writeKeyFile(path string, key []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".secrets-key-*")
	if err != nil {
		return fmt.Errorf("making the secrets key: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.WriteString(base64.StdEncoding.EncodeToString(key) + "\n"); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	// Link, not rename: a key another process made meanwhile wins, and this one is dropped.
	if err := os.Link(tmp.Name(), path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("making the secrets key: %w", err)
	}
	return nil
}

const sealVersion = 1

func additional(agent, name string) []byte {
	return []byte("sandpit-secret\x00" + agent + "\x00" + name)
}

// Seal encrypts value for the secret name of agent ("" shared).
func (c *Cipher) Seal(agent, name string, value []byte) []byte {
	out := make([]byte, 1+c.aead.NonceSize(), 1+c.aead.NonceSize()+len(value)+c.aead.Overhead())
	out[0] = sealVersion
	_, _ = rand.Read(out[1:])
	return c.aead.Seal(out, out[1:], value, additional(agent, name))
}

// Open decrypts what Seal made for the same agent and name. Errors: sealed by another key or
// for another secret, or altered.
func (c *Cipher) Open(agent, name string, sealed []byte) ([]byte, error) {
	ns := c.aead.NonceSize()
	if len(sealed) < 1+ns || sealed[0] != sealVersion {
		return nil, fmt.Errorf("secret %q: its stored value is not one this version of sandpit sealed", name)
	}
	v, err := c.aead.Open(nil, sealed[1:1+ns], sealed[1+ns:], additional(agent, name))
	if err != nil {
		return nil, fmt.Errorf("secret %q: its stored value does not open with the secrets key (%s or %s): the key changed, or the value was altered; set the secret again", name, KeyFileName, KeyEnv)
	}
	return v, nil
}
