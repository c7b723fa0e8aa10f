package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/jobmesh/jobmesh/services/executor-agent/meshtls"
)

// runTLS is `jobmesh tls init`: it makes a private CA and one certificate per host under a
// directory (reusing what is there), for a cluster that has no CA of its own (docker-compose.yml
// runs it as an init container).
func runTLS(_ context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] != "init" {
		return errors.New("usage: jobmesh tls init --dir DIR --hosts h1,h2,... [--owner UID:GID] [--etcd-hosts e1,e2,...]")
	}
	var dir, hosts, etcdHosts, owner string
	f := newFlags("jobmesh tls init", stderr)
	f.str(&dir, "dir", "", "`directory` of the CA (ca.pem, ca-key.pem) and the certificates (<host>.pem, <host>-key.pem) (required)")
	f.str(&hosts, "hosts", "", "comma-separated `hosts` (names or IPs): one certificate each, for serving and dialling, plus \"client\", a client certificate (for jobmesh health, say) (required)")
	f.str(&owner, "owner", "", "`uid:gid` to own the certificates and keys written (e.g. the user a container runs as); empty keeps the caller's")
	f.str(&etcdHosts, "etcd-hosts", "", "comma-separated etcd `hosts`: a separate etcd CA under DIR/etcd, a server certificate for them and a client certificate for the services")
	if err := f.parse(args[1:]); err != nil {
		return err
	}
	uid, gid, err := parseOwner(owner)
	if err != nil {
		return err
	}
	switch {
	case f.NArg() > 0:
		return fmt.Errorf("unexpected arguments: %v", f.Args())
	case dir == "":
		return errors.New("--dir: required")
	case len(splitList(hosts)) == 0:
		return errors.New("--hosts: required")
	}
	issue := func(ca *meshtls.CA, name string, sans ...string) error {
		files, err := ca.Leaf(name, sans...)
		if err != nil {
			return err
		}
		if uid >= 0 {
			for _, p := range []string{files.Cert, files.Key} {
				if err := os.Chown(p, uid, gid); err != nil {
					return fmt.Errorf("--owner: %w", err)
				}
			}
		}
		fmt.Fprintf(stdout, "%s: --tls-cert %s --tls-key %s --tls-ca %s\n", name, files.Cert, files.Key, files.CA)
		return nil
	}
	ca, err := meshtls.EnsureCA(dir)
	if err != nil {
		return err
	}
	if uid >= 0 { // other users must reach their files; the CA key stays the caller's, mode 0600
		if err := os.Chmod(dir, 0o755); err != nil {
			return err
		}
	}
	for _, h := range append(splitList(hosts), "client") {
		if err := issue(ca, h, h); err != nil {
			return err
		}
	}
	if eh := splitList(etcdHosts); len(eh) > 0 {
		eca, err := meshtls.EnsureCA(filepath.Join(dir, "etcd"))
		if err != nil {
			return err
		}
		if uid >= 0 {
			if err := os.Chmod(filepath.Join(dir, "etcd"), 0o755); err != nil {
				return err
			}
		}
		if err := issue(eca, "server", eh...); err != nil {
			return err
		}
		if err := issue(eca, "client"); err != nil {
			return err
		}
	}
	return nil
}

// parseOwner reads "UID:GID"; -1, -1 for empty.
func parseOwner(s string) (int, int, error) {
	if s == "" {
		return -1, -1, nil
	}
	u, g, ok := strings.Cut(s, ":")
	uid, err1 := strconv.Atoi(u)
	gid, err2 := strconv.Atoi(g)
	if !ok || err1 != nil || err2 != nil || uid < 0 || gid < 0 {
		return 0, 0, fmt.Errorf("--owner %q: want UID:GID, e.g. 65532:65532", s)
	}
	return uid, gid, nil
}
