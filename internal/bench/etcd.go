package bench

import (
	"context"
	"fmt"
	"io"

	"github.com/jobmesh/jobmesh/internal/etcdembed"
)

// EtcdConfig is the bench's etcd process: there is no etcd binary on the machines the bench
// runs on, so `jobmesh bench etcd` runs the embedded server as a process of its own.
type EtcdConfig struct {
	// Dir holds the data; ClientAddr is the client listen address (port 0 picks).
	Dir, ClientAddr string
	// Unsafe skips fsync.
	Unsafe bool
}

// RunEtcd runs etcd until ctx ends; it prints "etcd client <endpoint URL>" once it serves.
func RunEtcd(ctx context.Context, cfg EtcdConfig, stdout io.Writer) error {
	s, err := etcdembed.Start(ctx, etcdembed.Config{Dir: cfg.Dir, ClientAddr: cfg.ClientAddr, Unsafe: cfg.Unsafe})
	if err != nil {
		return err
	}
	defer s.Close()
	fmt.Fprintf(stdout, "etcd client %s\n", s.Endpoint())
	<-ctx.Done()
	return nil
}
