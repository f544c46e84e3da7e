package xds

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
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

// peerIdentity reads the verified client certificate of a TLS stream. ok is false on a stream
// without TLS (the plaintext port); an error means TLS without a usable identity.
func peerIdentity(ctx context.Context) (id Identity, ok bool, err error) {
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
// service-account token (see SetTokenAuthenticator).
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

// TokenAuthenticator checks a bearer token (a Kubernetes service-account JWT) and returns the
// identity it proves.
type TokenAuthenticator interface {
	Authenticate(ctx context.Context, token string) (Identity, error)
}

// SetTokenAuthenticator lets TLS clients without a certificate authenticate with a bearer token
// in the "authorization" gRPC metadata.
func (s *Server) SetTokenAuthenticator(a TokenAuthenticator) { s.tokens = a }

// bearerToken reads "authorization: Bearer <token>" from the stream's metadata.
func bearerToken(ctx context.Context) string {
	md, ok := metadata.FromIncomingContext(ctx)
	if !ok {
		return ""
	}
	for _, v := range md.Get("authorization") {
		if t, ok := strings.CutPrefix(v, "Bearer "); ok {
			return strings.TrimSpace(t)
		}
	}
	return ""
}

// authenticate finds a TLS stream's identity: its client certificate, else its bearer token.
// tlsConn is false on the plaintext port.
func (s *Server) authenticate(ctx context.Context) (id *Identity, tlsConn bool, err error) {
	idn, tlsConn, certErr := peerIdentity(ctx)
	if !tlsConn {
		return nil, false, nil
	}
	if certErr == nil {
		return &idn, true, nil
	}
	if tok := bearerToken(ctx); tok != "" && s.tokens != nil {
		idn, err := s.tokens.Authenticate(ctx, tok)
		if err != nil {
			return nil, true, fmt.Errorf("bearer token: %w", err)
		}
		return &idn, true, nil
	}
	return nil, true, certErr
}

// KubeTokenReview authenticates service-account tokens with the Kubernetes TokenReview API.
type KubeTokenReview struct {
	Client      kubernetes.Interface
	Audiences   []string
	TrustDomain string
}

// Authenticate implements TokenAuthenticator.
func (k KubeTokenReview) Authenticate(ctx context.Context, token string) (Identity, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tr, err := k.Client.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: k.Audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Identity{}, fmt.Errorf("TokenReview: %w", err)
	}
	if !tr.Status.Authenticated {
		return Identity{}, fmt.Errorf("token not authenticated: %s", tr.Status.Error)
	}
	// An authenticator that ignores audiences answers with none: the token is then not shown to
	// be meant for krteds.
	if len(k.Audiences) > 0 && !slices.ContainsFunc(tr.Status.Audiences, func(a string) bool { return slices.Contains(k.Audiences, a) }) {
		return Identity{}, fmt.Errorf("token not valid for audiences %v (the TokenReview answers %v)", k.Audiences, tr.Status.Audiences)
	}
	// system:serviceaccount:<namespace>:<name>
	parts := strings.Split(tr.Status.User.Username, ":")
	if len(parts) != 4 || parts[0] != "system" || parts[1] != "serviceaccount" {
		return Identity{}, fmt.Errorf("%q is not a service account", tr.Status.User.Username)
	}
	return Identity{TrustDomain: k.TrustDomain, Namespace: parts[2], ServiceAccount: parts[3]}, nil
}
