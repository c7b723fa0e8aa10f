package cli

import (
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// DefaultDevDataDir is `jobmesh dev`'s default --data-dir, where the client looks for dev's
// client certificate when no TLS flag is given.
const DefaultDevDataDir = ".data/dev"

// TLSFlags are how a client command (the client, `jobmesh health`) secures its connections:
// --tls-cert/--tls-key/--tls-ca, else --insecure, else the client certificate `jobmesh dev`
// made under --data-dir. Defaults come from the flags' JOBMESH_ twins.
type TLSFlags struct {
	Files    meshtls.Files
	Insecure bool
	DataDir  string
}

// Add declares the flags on fs.
func (t *TLSFlags) Add(fs *flag.FlagSet) {
	fs.StringVar(&t.Files.Cert, "tls-cert", os.Getenv("JOBMESH_TLS_CERT"), "PEM client certificate (with --tls-key and --tls-ca) (JOBMESH_TLS_CERT)")
	fs.StringVar(&t.Files.Key, "tls-key", os.Getenv("JOBMESH_TLS_KEY"), "PEM private key of --tls-cert (JOBMESH_TLS_KEY)")
	fs.StringVar(&t.Files.CA, "tls-ca", os.Getenv("JOBMESH_TLS_CA"), "PEM CA bundle the services' certificates must chain to (JOBMESH_TLS_CA)")
	fs.BoolVar(&t.Insecure, "insecure", os.Getenv("JOBMESH_INSECURE") == "true" || os.Getenv("JOBMESH_INSECURE") == "1", "plaintext, for services started with --insecure (JOBMESH_INSECURE)")
	fs.StringVar(&t.DataDir, "data-dir", or(os.Getenv("JOBMESH_DATA_DIR"), DefaultDevDataDir), "jobmesh dev's data directory, whose client certificate is used without --tls-* flags (JOBMESH_DATA_DIR)")
}

// Identity resolves the flags: the files given, plaintext (nil) with --insecure, else dev's
// client certificate under --data-dir; an error names the flags when none applies.
func (t *TLSFlags) Identity() (*meshtls.Identity, error) {
	if !t.Files.IsZero() || t.Insecure {
		return meshtls.Resolve(t.Files, t.Insecure)
	}
	dev := meshtls.DevFiles(t.DataDir, "client")
	if _, err := os.Stat(dev.Cert); errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no TLS: no jobmesh dev client certificate at %s (--data-dir %s); give --tls-cert, --tls-key and --tls-ca, or --insecure for plaintext", dev.Cert, t.DataDir)
	}
	id, err := meshtls.Load(dev)
	if err != nil {
		return nil, fmt.Errorf("--data-dir %s: %w", t.DataDir, err)
	}
	return id, nil
}
