package executor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
)

// secretCAVars name the trust bundle to the TLS clients a session's commands run: OpenSSL and
// Python's ssl, requests, curl, pip, git, and Node (which adds it to its own roots). The
// session's interpreter sets the same from its call's init line (bootstrap.py).
var secretCAVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"}

// systemRoots is the box's own trust bundle (Debian's ca-certificates).
const systemRoots = "/etc/ssl/certs/ca-certificates.crt"

// secretCAEnv returns the variables that make a command trust ca (the PEM of the CA the
// daemon's egress proxy signs its secrets' hosts' certificates with) beside the box's own
// roots: a bundle of both, written once under RunRoot (root's, readable by all: it holds
// certificates only) and named by content, so that a session's commands never see a
// half-written one.
func (e *Executor) secretCAEnv(ca string) ([]string, error) {
	sum := sha256.Sum256([]byte(ca))
	path := filepath.Join(e.cfg.RunRoot, "secrets-ca-"+hex.EncodeToString(sum[:8])+".pem")
	if _, err := os.Stat(path); err != nil {
		roots, err := os.ReadFile(systemRoots)
		if err != nil && !os.IsNotExist(err) {
			return nil, fmt.Errorf("reading the box's trust bundle: %w", err)
		}
		bundle := bytes.Join([][]byte{roots, []byte(ca)}, []byte("\n"))
		tmp, err := os.CreateTemp(e.cfg.RunRoot, ".secrets-ca-*")
		if err != nil {
			return nil, fmt.Errorf("writing the secrets' trust bundle: %w", err)
		}
		_, err = tmp.Write(bundle)
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Chmod(tmp.Name(), 0o644)
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			_ = os.Remove(tmp.Name())
			return nil, fmt.Errorf("writing the secrets' trust bundle: %w", err)
		}
	}
	env := make([]string, len(secretCAVars))
	for i, v := range secretCAVars {
		env[i] = v + "=" + path
	}
	return env, nil
}
