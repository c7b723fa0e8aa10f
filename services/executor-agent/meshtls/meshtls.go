// Package meshtls is the one TLS mechanism of every jobmesh binary: it loads a node's
// certificate, key and the mesh's CA from PEM files into mutual-TLS configurations (servers
// require a client certificate signed by the CA; clients verify the server against the CA and
// present their own certificate), and it keeps a private development CA on disk (ca.go) for
// `jobmesh dev`, `jobmesh tls init` and tests.
//
// It lives in the agent module, so that the agent, the Go SDK and the services (which import
// this module) share it without the agent pulling in anything heavy.
package meshtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// Files names the PEM files of one mesh identity: its certificate (chain), its private key, and
// the CA bundle its peers' certificates must chain to.
type Files struct {
	Cert, Key, CA string
}

// IsZero reports whether no file is named.
func (f Files) IsZero() bool { return f.Cert == "" && f.Key == "" && f.CA == "" }

// ErrNoTLS is returned by Resolve when neither TLS files nor plaintext were asked for.
var ErrNoTLS = errors.New("no TLS configured: give --tls-cert, --tls-key and --tls-ca (JOBMESH_TLS_CERT, JOBMESH_TLS_KEY, JOBMESH_TLS_CA), or --insecure (JOBMESH_INSECURE) to use plaintext")

// Resolve turns a command line's TLS flags into an identity: the loaded files, or nil with
// insecure set (plaintext; the caller logs the warning, InsecureWarning). Files together with
// insecure, or neither, are errors that name the flags.
func Resolve(f Files, insecure bool) (*Identity, error) {
	switch {
	case insecure && !f.IsZero():
		return nil, errors.New("--insecure: not with --tls-cert, --tls-key or --tls-ca")
	case insecure:
		return nil, nil
	case f.IsZero():
		return nil, ErrNoTLS
	}
	id, err := Load(f)
	if err != nil {
		return nil, fmt.Errorf("--tls-cert, --tls-key, --tls-ca: %w", err)
	}
	return id, nil
}

// InsecureWarning is what a process started with --insecure logs at every start.
const InsecureWarning = "--insecure: serving and dialling gRPC in plaintext without certificates; anyone who reaches the ports can talk to this process and read its traffic"

// Identity is a loaded mesh identity. Its certificate and key are read again when the
// certificate file's modification time changes (on the next handshake), so renewed files take
// effect without a restart; the CA bundle is read once.
type Identity struct {
	files Files
	pool  *x509.CertPool

	mu      sync.Mutex
	cert    *tls.Certificate
	certMod time.Time
}

// Load reads the files; all three must be given and readable, and the certificate must match
// the key. Errors name the file (cert, key or CA); callers add their flags' names.
func Load(f Files) (*Identity, error) {
	if f.Cert == "" || f.Key == "" || f.CA == "" {
		return nil, fmt.Errorf("cert %q, key %q, CA %q: all three are required", f.Cert, f.Key, f.CA)
	}
	caPEM, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, fmt.Errorf("CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("CA %s: no PEM certificate in it", f.CA)
	}
	id := &Identity{files: f, pool: pool}
	if _, err := id.certificate(); err != nil {
		return nil, err
	}
	return id, nil
}

// Files are the files the identity was loaded from.
func (id *Identity) Files() Files { return id.files }

// certificate returns the key pair, read again if the certificate file changed.
func (id *Identity) certificate() (*tls.Certificate, error) {
	id.mu.Lock()
	defer id.mu.Unlock()
	st, err := os.Stat(id.files.Cert)
	if err != nil {
		if id.cert != nil { // keep serving with what was loaded
			return id.cert, nil
		}
		return nil, fmt.Errorf("cert: %w", err)
	}
	if id.cert != nil && st.ModTime().Equal(id.certMod) {
		return id.cert, nil
	}
	c, err := tls.LoadX509KeyPair(id.files.Cert, id.files.Key)
	if err != nil {
		if id.cert != nil { // a half-written renewal: keep the old pair until it is whole
			return id.cert, nil
		}
		return nil, fmt.Errorf("cert %s, key %s: %w", id.files.Cert, id.files.Key, err)
	}
	id.cert, id.certMod = &c, st.ModTime()
	return id.cert, nil
}

// ServerConfig is the TLS configuration of a server: TLS 1.3, and a client certificate signed
// by the CA is required.
func (id *Identity) ServerConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		ClientAuth: tls.RequireAndVerifyClientCert,
		ClientCAs:  id.pool,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
			return id.certificate()
		},
	}
}

// ClientConfig is the TLS configuration of a client: the server must present a certificate
// signed by the CA for the name dialled (gRPC sets ServerName from the target's host), and the
// client presents its own.
func (id *Identity) ClientConfig() *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS13,
		RootCAs:    id.pool,
		GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			return id.certificate()
		},
	}
}

// ServerOptions make a gRPC server serve mutual TLS with the identity; a nil identity serves
// plaintext (no option).
func (id *Identity) ServerOptions() []grpc.ServerOption {
	if id == nil {
		return nil
	}
	return []grpc.ServerOption{grpc.Creds(credentials.NewTLS(id.ServerConfig()))}
}

// DialOption makes a gRPC client dial with mutual TLS with the identity; a nil identity dials
// plaintext.
func (id *Identity) DialOption() grpc.DialOption {
	if id == nil {
		return grpc.WithTransportCredentials(insecure.NewCredentials())
	}
	return grpc.WithTransportCredentials(credentials.NewTLS(id.ClientConfig()))
}
