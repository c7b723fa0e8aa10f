package scheduler

import (
	"context"

	"google.golang.org/grpc"

	clientv3 "go.etcd.io/etcd/client/v3"

	logsv1 "github.com/jobmesh/jobmesh/gen/jobmesh/logs/v1"
	registryv1 "github.com/jobmesh/jobmesh/gen/jobmesh/registry/v1"
	"github.com/jobmesh/jobmesh/internal/db"
)

// Mesh is where a replica stands in a running mesh: its store and etcd, its connections to the
// registry and logsvc, and how it calls executors and the other replicas. `jobmesh scheduler`
// and `jobmesh dev` both build their replica from one (NewInMesh), so a replica is wired the
// same way whichever command runs it.
type Mesh struct {
	// Store is the scheduler's database; Etcd the cluster's etcd.
	Store *db.DB
	Etcd  *clientv3.Client
	// Registry and Logs are connections to the registry and logsvc that present the internal
	// token.
	Registry, Logs grpc.ClientConnInterface
	// TLS is the dial option of the mesh's transport (its certificates, or plaintext): executors
	// and the other replicas are dialled with it.
	TLS grpc.DialOption
	// InternalToken is the mesh's internal token: it seals the fires' delivery tokens, and the
	// other replicas' guards accept forwarded triggers that present it (InternalCreds).
	InternalToken string
	// InternalCreds is the dial option that presents InternalToken on every call.
	InternalCreds grpc.DialOption
	// InternalCaller reports whether a call to this replica presented InternalToken (the auth
	// guard's auth.IsInternalCaller): a trigger forwarded by another replica.
	InternalCaller func(ctx context.Context) bool
	// AdvertiseAddr is where the other replicas reach this one's gRPC (host:port); empty when it
	// listens on every interface and no address was given.
	AdvertiseAddr string
}

// NewInMesh returns a replica wired into m: it seals delivery tokens with the internal token,
// dials executors over the mesh's transport, and forwards manual triggers to the partitions'
// leaders over that transport with the internal token. Dial options already set in cfg (tests
// that stand in for executors or peers) are kept.
func NewInMesh(cfg Config, m Mesh) (*Service, error) {
	cfg.DeliverySecret = m.InternalToken
	if cfg.ExecutorDialOptions == nil {
		cfg.ExecutorDialOptions = []grpc.DialOption{m.TLS}
	}
	if cfg.AdvertiseAddr == "" {
		cfg.AdvertiseAddr = m.AdvertiseAddr
	}
	if cfg.PeerDialOptions == nil {
		cfg.PeerDialOptions = []grpc.DialOption{m.TLS, m.InternalCreds}
	}
	if cfg.FromReplica == nil {
		cfg.FromReplica = m.InternalCaller
	}
	return New(cfg, Deps{
		Store: m.Store, Etcd: m.Etcd, Registry: registryv1.NewRegistryServiceClient(m.Registry),
		Ingest: logsv1.NewIngestServiceClient(m.Logs), Logs: logsv1.NewLogServiceClient(m.Logs),
	})
}
