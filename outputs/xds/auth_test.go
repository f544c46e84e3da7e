package xds

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"math/big"
	"net"
	"net/url"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newCA(t *testing.T) *testCA {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	return &testCA{cert: cert, key: key}
}

// issue signs a leaf certificate; uri is its SPIFFE URI SAN ("" for none).
func (ca *testCA) issue(t *testing.T, uri string, server bool) tls.Certificate {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: "leaf"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth, x509.ExtKeyUsageServerAuth}}
	if server {
		tmpl.IPAddresses = []net.IP{net.ParseIP("127.0.0.1")}
	}
	if uri != "" {
		u, _ := url.Parse(uri)
		tmpl.URIs = []*url.URL{u}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

func TestAuthenticatedXDS(t *testing.T) {
	r := newRig(t, mesh()...)
	r.srv.SetTrustDomain("cluster.local")
	ca := newCA(t)
	pool := x509.NewCertPool()
	pool.AddCert(ca.cert)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(context.Background(), r.srv, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{ca.issue(t, "", true)}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})))
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
	ns1 := ca.issue(t, "spiffe://cluster.local/ns/ns1/sa/foo", false)
	other := ca.issue(t, "spiffe://other.domain/ns/ns1/sa/foo", false)
	noSpiffe := ca.issue(t, "", false)
	foreign := newCA(t).issue(t, "spiffe://cluster.local/ns/ns1/sa/foo", false)
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

func TestParseSpiffeID(t *testing.T) {
	if id, err := ParseSpiffeID("spiffe://td/ns/a/sa/b"); err != nil || id != (Identity{TrustDomain: "td", Namespace: "a", ServiceAccount: "b"}) {
		t.Fatalf("%+v %v", id, err)
	}
	for _, bad := range []string{"", "spiffe://td/ns/a", "spiffe://td/ns//sa/b", "http://td/ns/a/sa/b", "spiffe://td/sa/b/ns/a", "spiffe://td/ns/a/sa/b/c"} {
		if _, err := ParseSpiffeID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
