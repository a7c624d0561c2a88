package executor

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// secretCAVars name the trust bundle to the TLS clients a session's commands run: OpenSSL and
// Python's ssl, requests, curl, pip, git, and Node (which adds it to its own roots). The
// session's interpreter sets the same from its call's init line (bootstrap.py).
var secretCAVars = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "PIP_CERT", "GIT_SSL_CAINFO", "NODE_EXTRA_CA_CERTS"}

// rootBundles are where Linux distributions keep their trust bundle, in the order Go's
// crypto/x509 looks for one (root_linux.go): Debian, Ubuntu and Alpine; Fedora and RHEL 6;
// openSUSE; OpenELEC; CentOS and RHEL 7; Alpine's other name. A template may start from any.
var rootBundles = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// maxRootsBytes bounds the box's trust bundle the executor reads (Debian's is about 200 KiB).
const maxRootsBytes = 16 << 20

// boxRoots reads the box's own trust bundle: the file SSL_CERT_FILE names in the box's
// environment (a template's own trust store), else the first of bundles that exists. Only its
// PEM certificates are kept: the executor reads it as root, and a template's image may name
// any file (a key only root may read, /proc/1/environ, /dev/zero), so what is not a
// certificate never reaches the bundle every user of the box reads. A file that cannot be
// read, is not regular or passes maxRootsBytes is passed over for the next; skipped says why
// (nil: none was). A box with none has no roots (nil).
func boxRoots(getenv func(string) string, bundles []string) (certs []byte, skipped error) {
	if f := getenv("SSL_CERT_FILE"); f != "" {
		bundles = append([]string{f}, bundles...)
	}
	var problems []error
	for _, f := range bundles {
		raw, err := readRegular(f, maxRootsBytes)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			problems = append(problems, fmt.Errorf("the box's trust bundle %s was passed over: %w", f, err))
			continue
		}
		for rest := raw; ; {
			var block *pem.Block
			if block, rest = pem.Decode(rest); block == nil {
				break
			}
			if block.Type == "CERTIFICATE" && len(block.Headers) == 0 {
				certs = append(certs, pem.EncodeToMemory(block)...)
			}
		}
		break
	}
	return certs, errors.Join(problems...)
}

// readRegular reads file f, which must be a regular file of at most limit bytes.
func readRegular(f string, limit int64) ([]byte, error) {
	file, err := os.Open(f)
	if err != nil {
		return nil, err
	}
	defer file.Close()
	st, err := file.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("not a regular file (%s)", st.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(file, limit+1))
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("larger than %d MiB", limit>>20)
	}
	return b, err
}

// secretCAEnv returns the variables that make a command trust ca (the PEM of the CA the
// daemon's egress proxy signs its secrets' hosts' certificates with) beside the box's own
// roots: they name its bundle (see secretCABundle).
func (e *Executor) secretCAEnv(ca string) ([]string, error) {
	path, err := e.secretCABundle(ca)
	if err != nil {
		return nil, err
	}
	env := make([]string, len(secretCAVars))
	for i, v := range secretCAVars {
		env[i] = v + "=" + path
	}
	return env, nil
}

// secretCABundle returns the path of a bundle of ca and the box's own roots (see boxRoots),
// written once under RunRoot (root's, readable by all: it holds certificates only) and named
// by content, so that a session's commands and calls never see a half-written one.
func (e *Executor) secretCABundle(ca string) (string, error) {
	sum := sha256.Sum256([]byte(ca))
	path := filepath.Join(e.cfg.RunRoot, "secrets-ca-"+hex.EncodeToString(sum[:8])+".pem")
	if _, err := os.Stat(path); err != nil {
		roots, skipped := boxRoots(os.Getenv, rootBundles)
		if skipped != nil {
			e.log.Warn("writing the secrets' trust bundle", "error", skipped)
		}
		bundle := bytes.Join([][]byte{roots, []byte(ca)}, []byte("\n"))
		if err := publish(path, bundle); err != nil {
			return "", fmt.Errorf("writing the secrets' trust bundle: %w", err)
		}
	}
	return path, nil
}
