package meshtls_test

import (
	"crypto/tls"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
)

func grpcTLS(c *tls.Config) grpc.DialOption {
	return grpc.WithTransportCredentials(credentials.NewTLS(c))
}
