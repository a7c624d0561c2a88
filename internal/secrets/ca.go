package secrets

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"
)

// CAFileName and CAKeyFileName are the daemon's CA certificate and key in the data directory.
// The certificate is what sandboxes trust for the hosts of bound secrets; the key (mode 0600)
// never leaves the daemon.
const (
	CAFileName    = "secrets-ca.pem"
	CAKeyFileName = "secrets-ca-key.pem"
)

// maxLeaves caps the host certificates a CA keeps made.
const maxLeaves = 1024

// CA is the daemon's own certificate authority: it signs a certificate for each host of a
// bound secret, presented to the sandbox when the egress proxy terminates its TLS. Safe for
// concurrent use.
type CA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
	now  func() time.Time

	mu     sync.Mutex
	leaves map[string]*tls.Certificate
}

// LoadCA returns the CA kept in dir (CAFileName, CAKeyFileName), made when there is none: an
// ECDSA P-256 key and a self-signed certificate valid ten years. Errors: a key file readable
// by others than its owner, files that do not parse.
func LoadCA(dir string) (*CA, error) {
	certPath, keyPath := filepath.Join(dir, CAFileName), filepath.Join(dir, CAKeyFileName)
	certPEM, err := os.ReadFile(certPath)
	if errors.Is(err, fs.ErrNotExist) {
		return makeCA(certPath, keyPath)
	}
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(keyPath)
	if err != nil {
		return nil, fmt.Errorf("the secrets CA: %w (remove %s to make a new CA)", err, certPath)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("the secrets CA key %s has mode %v: others than its owner may read it; `chmod 600 %s`", keyPath, fi.Mode().Perm(), keyPath)
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

// NewCA makes a CA held in memory only (tests, one-off engines).
func NewCA() (*CA, error) {
	certPEM, keyPEM, err := generateCA()
	if err != nil {
		return nil, err
	}
	return parseCA(certPEM, keyPEM)
}

func generateCA() (certPEM, keyPEM []byte, err error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "sandpit secrets CA", Organization: []string{"sandpit"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

func makeCA(certPath, keyPath string) (*CA, error) {
	certPEM, keyPEM, err := generateCA()
	if err != nil {
		return nil, err
	}
	// The key first, 0600, then the certificate that says the pair is whole.
	if err := os.WriteFile(keyPath, keyPEM, 0o600); err != nil {
		return nil, fmt.Errorf("making the secrets CA: %w", err)
	}
	if err := os.WriteFile(certPath, certPEM, 0o644); err != nil {
		return nil, fmt.Errorf("making the secrets CA: %w", err)
	}
	return parseCA(certPEM, keyPEM)
}

func parseCA(certPEM, keyPEM []byte) (*CA, error) {
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("the secrets CA does not parse: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(*ecdsa.PrivateKey)
	if !ok || !cert.IsCA {
		return nil, errors.New("the secrets CA is not an ECDSA CA certificate and key")
	}
	return &CA{cert: cert, key: key, pem: certPEM, now: time.Now, leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the CA's certificate in PEM: what a sandbox adds to its trust store.
func (c *CA) CertPEM() []byte { return c.pem }

// Pool is a pool of the CA's certificate alone (for tests' clients).
func (c *CA) Pool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(c.cert)
	return p
}

// Leaf returns a certificate for host (a name, or an IP address) signed by the CA, valid a day, made once and kept (up to
// maxLeaves hosts, then made again) until it is within an hour of expiring.
func (c *CA) Leaf(host string) (*tls.Certificate, error) {
	now := c.now()
	c.mu.Lock()
	if l, ok := c.leaves[host]; ok && now.Add(time.Hour).Before(l.Leaf.NotAfter) {
		c.mu.Unlock()
		return l, nil
	}
	c.mu.Unlock()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	serial, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	if ip := net.ParseIP(host); ip != nil {
		tmpl.IPAddresses = []net.IP{ip}
	} else {
		tmpl.DNSNames = []string{host}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, &key.PublicKey, c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key, Leaf: leaf}
	c.mu.Lock()
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[host] = l
	c.mu.Unlock()
	return l, nil
}
