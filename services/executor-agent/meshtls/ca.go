package meshtls

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"slices"
	"time"
)

// Lifetimes of what the development CA issues. A leaf closer than leafRenewBefore to its end is
// issued again at the next start.
const (
	caLifetime      = 10 * 365 * 24 * time.Hour
	leafLifetime    = 2 * 365 * 24 * time.Hour
	leafRenewBefore = 30 * 24 * time.Hour
)

// CA is a private certificate authority kept in a directory: ca.pem (the certificate peers
// trust) and ca-key.pem (mode 0600). It issues leaf certificates good for both server and client
// use, so one file pair serves a process's listener and its outgoing calls.
type CA struct {
	dir  string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

// EnsureCA loads the CA in dir, creating dir (mode 0700) and a new ECDSA P-256 CA on first use.
func EnsureCA(dir string) (*CA, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("tls dir: %w", err)
	}
	ca := &CA{dir: dir}
	certPath, keyPath := ca.CertFile(), filepath.Join(dir, "ca-key.pem")
	cert, key, err := readPair(certPath, keyPath)
	switch {
	case err == nil:
		ca.cert, ca.key = cert, key
		return ca, nil
	case !errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("tls dir %s: CA: %w", dir, err)
	}
	if key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader); err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{CommonName: "jobmesh private CA", Organization: []string{"jobmesh"}},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLifetime),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	if cert, err = x509.ParseCertificate(der); err != nil {
		return nil, err
	}
	// The key first: a certificate without its key would be taken for a whole CA.
	if err := writeKey(keyPath, key); err != nil {
		return nil, err
	}
	if err := writeFile(certPath, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	ca.cert, ca.key = cert, key
	return ca, nil
}

// CertFile is the path of the CA certificate, the --tls-ca of every process of the mesh.
func (ca *CA) CertFile() string { return filepath.Join(ca.dir, "ca.pem") }

// Identity is Leaf's certificate, loaded: what a process presents and verifies its peers with.
func (ca *CA) Identity(name string, hosts ...string) (*Identity, error) {
	f, err := ca.Leaf(name, hosts...)
	if err != nil {
		return nil, err
	}
	return Load(f)
}

// Leaf returns the files of the leaf certificate name (<name>.pem, <name>-key.pem) for the
// hosts given plus localhost, 127.0.0.1 and ::1, issuing it on first use. An existing leaf is
// reused while it was signed by this CA, names every host and is not about to expire; otherwise
// it is issued again.
func (ca *CA) Leaf(name string, hosts ...string) (Files, error) {
	if name == "" || name != filepath.Base(name) || name[0] == '.' {
		return Files{}, fmt.Errorf("leaf name %q: want a plain file name", name)
	}
	f := Files{Cert: filepath.Join(ca.dir, name+".pem"), Key: filepath.Join(ca.dir, name+"-key.pem"), CA: ca.CertFile()}
	var dns []string
	var ips []net.IP
	for _, h := range append([]string{"localhost", "127.0.0.1", "::1"}, hosts...) {
		if ip := net.ParseIP(h); ip != nil {
			if !slices.ContainsFunc(ips, ip.Equal) {
				ips = append(ips, ip)
			}
		} else if h != "" && !slices.Contains(dns, h) {
			dns = append(dns, h)
		}
	}
	if cert, _, err := readPair(f.Cert, f.Key); err == nil && ca.covers(cert, dns, ips) {
		return f, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return Files{}, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: name, Organization: []string{"jobmesh"}},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(leafLifetime),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		return Files{}, err
	}
	if err := writeKey(f.Key, key); err != nil {
		return Files{}, err
	}
	if err := writeFile(f.Cert, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return Files{}, err
	}
	return f, nil
}

// covers reports whether cert was signed by the CA, names every host and has time left.
func (ca *CA) covers(cert *x509.Certificate, dns []string, ips []net.IP) bool {
	if cert.CheckSignatureFrom(ca.cert) != nil || time.Until(cert.NotAfter) < leafRenewBefore {
		return false
	}
	for _, d := range dns {
		if !slices.Contains(cert.DNSNames, d) {
			return false
		}
	}
	for _, ip := range ips {
		if !slices.ContainsFunc(cert.IPAddresses, ip.Equal) {
			return false
		}
	}
	return true
}

// readPair reads a PEM certificate and its ECDSA key, and checks they belong together.
func readPair(certPath, keyPath string) (*x509.Certificate, *ecdsa.PrivateKey, error) {
	certPEM, err := os.ReadFile(certPath)
	if err != nil {
		return nil, nil, err
	}
	keyPEM, err := os.ReadFile(keyPath)
	if err != nil {
		return nil, nil, err
	}
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, fmt.Errorf("%s or %s: not PEM", certPath, keyPath)
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", certPath, err)
	}
	key, err := x509.ParseECPrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", keyPath, err)
	}
	if !key.PublicKey.Equal(cert.PublicKey) {
		return nil, nil, fmt.Errorf("%s does not match %s", keyPath, certPath)
	}
	return cert, key, nil
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return writeFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

// writeFile writes data to path whole or not at all (a temporary file renamed over it).
func writeFile(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // after a successful rename there is nothing left to remove
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// serial is a random 127-bit serial number (crypto/rand does not fail on supported platforms).
func serial() *big.Int {
	n, _ := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	return n
}

// DevDir is where `jobmesh dev` keeps its private CA and certificates: <dataDir>/tls.
func DevDir(dataDir string) string { return filepath.Join(dataDir, "tls") }

// DevFiles are the files of the leaf name that `jobmesh dev` issued under dataDir ("client"
// for the command-line client and health checks, "node" for the services and the local agent).
func DevFiles(dataDir, name string) Files {
	dir := DevDir(dataDir)
	return Files{Cert: filepath.Join(dir, name+".pem"), Key: filepath.Join(dir, name+"-key.pem"), CA: filepath.Join(dir, "ca.pem")}
}
