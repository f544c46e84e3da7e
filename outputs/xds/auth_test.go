package xds

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/krteds/krteds/outputs/xds/admission"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

// countingTokens accepts the tokens it maps to a namespace (as service account "sa"), refuses
// the others, and counts the reviews asked of it.
type countingTokens struct {
	accept  map[string]string
	reviews atomic.Int64
}

func (c *countingTokens) Authenticate(_ context.Context, token string) (admission.Identity, error) {
	c.reviews.Add(1)
	ns, ok := c.accept[token]
	if !ok {
		return admission.Identity{}, admission.RejectedToken{Reason: "unknown token"}
	}
	return admission.Identity{TrustDomain: "cluster.local", Namespace: ns, ServiceAccount: "sa"}, nil
}

// jwtWith is a token shaped as a JWT with these claims (its signature is not one).
func jwtWith(claims string) string {
	enc := base64.RawURLEncoding.EncodeToString
	return enc([]byte(`{"alg":"RS256"}`)) + "." + enc([]byte(claims)) + ".c2ln"
}

// tokenServer serves the fake source on a TLS port where clients authenticate with a token.
type tokenServer struct {
	*fakeServer
	ca     *fixtures.CA
	addr   string
	tokens *countingTokens
}

func startTokenServer(t *testing.T, opts ...func(*Options)) *tokenServer {
	t.Helper()
	tokens := &countingTokens{accept: map[string]string{}}
	ts := &tokenServer{tokens: tokens}
	ts.fakeServer = startFake(t, append([]func(*Options){func(o *Options) {
		o.Tokens = admission.NewTokenCache(tokens)
		o.TrustDomain = "cluster.local"
	}}, opts...)...)
	ca, err := fixtures.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("", true)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(context.Background(), ts.srv, credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven, MinVersion: tls.VersionTLS12}))
	go func() { _ = gs.Serve(lis) }()
	t.Cleanup(gs.Stop)
	ts.ca, ts.addr = ca, lis.Addr().String()
	return ts
}

// dial connects over TLS without a client certificate.
func (ts *tokenServer) dial(t *testing.T) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(ts.addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ts.ca.Pool(), ServerName: "127.0.0.1"})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// stream opens a stream with a bearer token ("" for none) as a proxy of ns1 and asks for e0;
// it returns the stream once answered, or the error that ended it.
func (ts *tokenServer) stream(t *testing.T, cc *grpc.ClientConn, token string, i int) (*adsclient.Stream, error) {
	t.Helper()
	ctx := context.Background()
	if token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+token)
	}
	s, err := adsclient.Open(ctx, cc, sidecarNode(i))
	if err != nil {
		return nil, err
	}
	t.Cleanup(s.Close)
	_ = s.Request(tEndpoint.url(), "e0")
	if _, err := s.Recv(10 * time.Second); err != nil {
		return nil, err
	}
	return s, nil
}

// TestStreamsAreAuthenticatedBeforeAnything: on the authenticated port, a stream without a
// usable identity is refused as it opens, before it sends anything, and leaves nothing behind.
func TestStreamsAreAuthenticatedBeforeAnything(t *testing.T) {
	ts := startTokenServer(t)
	ts.src.set(tEndpoint.url(), "e0")
	cc := ts.dial(t)
	for _, tc := range []struct{ name, token string }{
		{"no token", ""},
		{"a token the review refuses", jwtWith(`{"sub":"x"}`)},
		{"not a JWT", "opaque-token"},
	} {
		ctx := context.Background()
		if tc.token != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tc.token)
		}
		s, err := adsclient.Open(ctx, cc, sidecarNode(1))
		if err != nil {
			t.Fatal(err)
		}
		// Nothing is sent: the answer is the refusal.
		_, err = s.Recv(10 * time.Second)
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("%s: %v, want Unauthenticated before any request", tc.name, err)
		}
		s.Close()
	}
	if n := ts.srv.Streams(); n != 0 {
		t.Fatalf("%d refused streams are registered", n)
	}
}

// TestTokenReviewsAreCached: fifty streams presenting one token cost one TokenReview, and so do
// fifty presenting one refused token; a token shaped as no JWT, or expired, costs none.
func TestTokenReviewsAreCached(t *testing.T) {
	ts := startTokenServer(t)
	ts.src.set(tEndpoint.url(), "e0")
	good := jwtWith(fmt.Sprintf(`{"exp":%d}`, time.Now().Add(time.Hour).Unix()))
	ts.tokens.accept[good] = "ns1"
	bad := jwtWith(`{"sub":"nobody"}`)
	expired := jwtWith(fmt.Sprintf(`{"exp":%d}`, time.Now().Add(-time.Minute).Unix()))
	cc := ts.dial(t)
	var wg sync.WaitGroup
	errs := make(chan error, 200)
	for i := 0; i < 50; i++ {
		for _, tok := range []string{good, bad, expired, "not-a-jwt"} {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := ts.stream(t, cc, tok, i)
				if (err == nil) != (tok == good) {
					errs <- fmt.Errorf("token %.20s…: %v", tok, err)
				}
			}()
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// One review each for the good and the refused token; at most a few more where streams
	// asked at the same moment.
	if n := ts.tokens.reviews.Load(); n < 2 || n > 2+admission.MaxConcurrentReviews {
		t.Fatalf("%d TokenReviews for 200 streams of 4 tokens, want 2 (plus concurrent misses)", n)
	}
}

// TestStreamsPerIdentityAreBounded: one identity holds at most the streams its bound allows;
// another identity is not affected, and a stream closing makes room.
func TestStreamsPerIdentityAreBounded(t *testing.T) {
	ts := startTokenServer(t, func(o *Options) { o.Limits = Limits{StreamsPerIdentity: 3} })
	ts.src.set(tEndpoint.url(), "e0")
	a := jwtWith(`{"sub":"a"}`)
	b := jwtWith(`{"sub":"b"}`)
	ts.tokens.accept[a], ts.tokens.accept[b] = "ns1", "ns1b"
	cc := ts.dial(t)
	var held []*adsclient.Stream
	for i := 0; i < 3; i++ {
		s, err := ts.stream(t, cc, a, i)
		if err != nil {
			t.Fatalf("stream %d of a: %v", i, err)
		}
		held = append(held, s)
	}
	if _, err := ts.stream(t, cc, a, 3); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("a fourth stream of one identity: %v, want ResourceExhausted", err)
	}
	// b's node claims ns1b, its identity's namespace.
	ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+b)
	sb, err := adsclient.Open(ctx, cc, adsclient.Node{ID: "sidecar~10.1.9.9~b.ns1b~ns1b.svc.cluster.local", Namespace: "ns1b"})
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Close()
	_ = sb.Request(tEndpoint.url(), "e0")
	if _, err := sb.Recv(10 * time.Second); err != nil {
		t.Fatalf("another identity: %v", err)
	}
	held[0].Close()
	fixtures.Polling("each attempt is the probe: the server counts a closed stream out when its handler returns, which nothing signals").
		Await(t, 10*time.Second, "a's fourth stream, after one of its streams closed", func() (bool, string) {
			_, err := ts.stream(t, cc, a, 4)
			if err != nil && status.Code(err) != codes.ResourceExhausted {
				t.Fatalf("after one of a's streams closed: %v", err)
			}
			return err == nil, fmt.Sprint(err)
		})
}
