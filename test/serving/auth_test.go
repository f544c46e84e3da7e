package serving

import (
	"context"
	"crypto/tls"
	"net"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

func newCA(t *testing.T) *fixtures.CA {
	t.Helper()
	ca, err := fixtures.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func issue(t *testing.T, ca *fixtures.CA, uri string, server bool) tls.Certificate {
	t.Helper()
	c, err := ca.Issue(uri, server)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestAuthenticatedXDS(t *testing.T) {
	r := newRig(t, mesh()...) // its server takes identities of the default trust domain only
	ca := newCA(t)
	pool := ca.Pool()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := xds.NewGRPCServer(context.Background(), r.Srv, credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{issue(t, ca, "", true)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	}))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)

	connect := func(cert *tls.Certificate, ns string) error {
		cfg := &tls.Config{RootCAs: pool, ServerName: "127.0.0.1"}
		if cert != nil {
			cfg.Certificates = []tls.Certificate{*cert}
		}
		cc, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			return err
		}
		defer cc.Close()
		s, err := adsclient.Open(context.Background(), cc, sidecar("10.9.0.1", ns))
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.Request(adsclient.TypeCLA, fooCluster); err != nil {
			return err
		}
		_, err = s.Recv(wait)
		return err
	}
	ns1 := issue(t, ca, "spiffe://cluster.local/ns/ns1/sa/foo", false)
	other := issue(t, ca, "spiffe://other.domain/ns/ns1/sa/foo", false)
	noSpiffe := issue(t, ca, "", false)
	foreign := issue(t, newCA(t), "spiffe://cluster.local/ns/ns1/sa/foo", false)
	cases := []struct {
		name string
		cert *tls.Certificate
		ns   string
		want codes.Code
	}{
		{"identity matches the claimed namespace", &ns1, "ns1", codes.OK},
		{"another namespace is refused", &ns1, "ns2", codes.PermissionDenied},
		{"another trust domain is refused", &other, "ns1", codes.PermissionDenied},
		{"a certificate without SPIFFE ID is refused", &noSpiffe, "ns1", codes.Unauthenticated},
		{"a certificate from another CA fails the handshake", &foreign, "ns1", codes.Unavailable},
		{"no client certificate fails the handshake", nil, "ns1", codes.Unavailable},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := connect(tc.cert, tc.ns)
			if got := status.Code(err); got != tc.want {
				t.Fatalf("got %v (%v), want %v", got, err, tc.want)
			}
		})
	}
}
