// Package admission decides who may open an xDS stream: it authenticates a stream's client (its
// client certificate's SPIFFE identity, or a Kubernetes service-account token checked with
// TokenReview), authorizes the namespace its node claims, and bounds the TokenReviews any
// number of clients can cause.
package admission

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/collections"
)

// Identity is an authenticated workload identity: spiffe://<trust-domain>/ns/<ns>/sa/<sa>.
type Identity struct {
	TrustDomain    string
	Namespace      string
	ServiceAccount string
}

func (i Identity) String() string {
	return "spiffe://" + i.TrustDomain + "/ns/" + i.Namespace + "/sa/" + i.ServiceAccount
}

// ParseSpiffeID parses spiffe://<trust-domain>/ns/<ns>/sa/<sa>.
func ParseSpiffeID(id string) (Identity, error) {
	rest, ok := strings.CutPrefix(id, "spiffe://")
	if !ok {
		return Identity{}, fmt.Errorf("%q is not a SPIFFE ID", id)
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 5 || parts[0] == "" || parts[1] != "ns" || parts[2] == "" || parts[3] != "sa" || parts[4] == "" {
		return Identity{}, fmt.Errorf("SPIFFE ID %q is not of the form spiffe://<trust-domain>/ns/<namespace>/sa/<service-account>", id)
	}
	return Identity{TrustDomain: parts[0], Namespace: parts[2], ServiceAccount: parts[4]}, nil
}

// PeerIdentity reads the verified client certificate of a TLS stream. ok is false on a stream
// without TLS (the plaintext port); an error means TLS without a usable identity.
func PeerIdentity(ctx context.Context) (id Identity, ok bool, err error) {
	p, found := peer.FromContext(ctx)
	if !found || p.AuthInfo == nil {
		return Identity{}, false, nil
	}
	info, isTLS := p.AuthInfo.(credentials.TLSInfo)
	if !isTLS {
		return Identity{}, false, nil
	}
	chains := info.State.VerifiedChains
	if len(chains) == 0 || len(chains[0]) == 0 {
		return Identity{}, true, errors.New("no verified client certificate")
	}
	for _, u := range chains[0][0].URIs {
		if u.Scheme == "spiffe" {
			id, err := ParseSpiffeID(u.String())
			return id, true, err
		}
	}
	return Identity{}, true, errors.New("the client certificate has no SPIFFE URI SAN")
}

// ServerTLS loads the serving certificate and the CA bundle that client certificates must chain
// to. With requireCert every connection must present one; otherwise a client may instead send a
// service-account token (see Options.Tokens).
func ServerTLS(certFile, keyFile, caFile string, requireCert bool) (*tls.Config, error) {
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("loading the xDS TLS certificate: %w", err)
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("reading the client CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in the client CA bundle %s", caFile)
	}
	auth := tls.VerifyClientCertIfGiven
	if requireCert {
		auth = tls.RequireAndVerifyClientCert
	}
	return &tls.Config{
		Certificates: []tls.Certificate{cert},
		ClientCAs:    pool,
		ClientAuth:   auth,
		MinVersion:   tls.VersionTLS12,
	}, nil
}

// Authorize checks that an identity (nil on the plaintext port, trusted by where it listens)
// may act as a proxy of a namespace: it is of the trust domain ("" for any) and of that
// namespace.
func Authorize(idn *Identity, trustDomain, namespace string) error {
	if idn == nil {
		return nil
	}
	if trustDomain != "" && idn.TrustDomain != trustDomain {
		return status.Errorf(codes.PermissionDenied, "identity %s is not in trust domain %s", idn, trustDomain)
	}
	if idn.Namespace != namespace {
		return status.Errorf(codes.PermissionDenied, "identity %s may not act as a proxy in namespace %s", idn, clip(namespace))
	}
	return nil
}

// clip shortens client-supplied text for a status, saying how much was cut.
func clip(s string) string { return collections.Truncate(s, 256) }
