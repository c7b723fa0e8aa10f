// Package etcdtest shares one embedded etcd per test package: each data directory costs about
// 123 MiB of disk, so packages start one server in TestMain instead of one per test.
package etcdtest

import (
	"context"
	"fmt"
	"os"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/jobmesh/jobmesh/internal/etcdembed"
)

var server *etcdembed.Server

// Main starts the package's server, runs the tests and stops it; call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(etcdtest.Main(m)) }
func Main(m *testing.M) int {
	dir, err := os.MkdirTemp("", "jobmesh-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	server, err = etcdembed.Start(context.Background(), etcdembed.Config{Dir: dir, Unsafe: true})
	if err != nil {
		fmt.Fprintln(os.Stderr, "etcdtest:", err)
		return 1
	}
	defer server.Close()
	return m.Run()
}

// Client returns a client of the package's server, closed when the test ends.
func Client(tb testing.TB) *clientv3.Client {
	tb.Helper()
	if server == nil {
		tb.Fatal("etcdtest: no server; call etcdtest.Main from TestMain")
	}
	c, err := server.Client()
	if err != nil {
		tb.Fatalf("etcdtest: client: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}
