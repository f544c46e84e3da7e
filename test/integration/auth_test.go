package integration

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"istio.io/istio/pkg/kube"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	krteds "github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/test/fixtures"
)

type bearer string

func (b bearer) GetRequestMetadata(context.Context, ...string) (map[string]string, error) {
	return map[string]string{"authorization": "Bearer " + string(b)}, nil
}
func (bearer) RequireTransportSecurity() bool { return true }

// TestServiceAccountTokens: on the TLS port a client without a certificate authenticates with
// its service-account token, checked by the API server's TokenReview; it may only act as a proxy
// of its own namespace.
// secureKrteds is krteds on an API server with its authenticated port: a serving certificate of
// a fresh CA, client certificates of that CA, or tokens of audience istio-ca checked with a
// TokenReview as the client c.
type secureKrteds struct {
	app           *krteds.App
	ca            *fixtures.CA
	plain, secure string
}

func startSecureKrteds(t *testing.T, c kube.Client) secureKrteds {
	t.Helper()
	ca, err := fixtures.NewCA()
	if err != nil {
		t.Fatal(err)
	}
	serverCert, err := ca.Issue("", true)
	if err != nil {
		t.Fatal(err)
	}
	plain, _ := net.Listen("tcp", "127.0.0.1:0")
	secure, _ := net.Listen("tcp", "127.0.0.1:0")
	debug, _ := net.Listen("tcp", "127.0.0.1:0")
	app, err := krteds.Start(krteds.Options{
		Config: collections.DefaultConfig(), Cluster: c, XDSListener: plain, DebugListener: debug,
		SecureListener: secure, TokenAudiences: []string{"istio-ca"},
		SecureTLS: &tls.Config{Certificates: []tls.Certificate{serverCert}, ClientCAs: ca.Pool(), ClientAuth: tls.VerifyClientCertIfGiven},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(app.Stop)
	return secureKrteds{app: app, ca: ca, plain: plain.Addr().String(), secure: secure.Addr().String()}
}

func TestServiceAccountTokens(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	ctx := context.Background()
	const ns = "scenario5"
	mesh(t, c, ns, 1)
	if _, err := c.Kube().CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "client"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ensureNamespace(t, c, "istio-system")
	if _, err := c.Kube().CoreV1().ServiceAccounts("istio-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "debugger"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if _, err := c.Kube().CoreV1().ServiceAccounts("default").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "other"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tokenOf := func(ns, sa, aud string) string {
		tr, err := c.Kube().CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
			&authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{aud}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	token := func(aud string) string { return tokenOf(ns, "client", aud) }

	k := startSecureKrteds(t, client(t))
	app, ca, secure := k.app, k.ca, k.secure

	connect := func(tok, claimedNS string) error {
		cc, err := grpc.NewClient(secure,
			grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{RootCAs: ca.Pool(), ServerName: "127.0.0.1"})),
			grpc.WithPerRPCCredentials(bearer(tok)))
		if err != nil {
			return err
		}
		defer cc.Close()
		s, err := adsclient.Open(ctx, cc, adsclient.Node{ID: "sidecar~10.30.0.5~client." + claimedNS + "~" + claimedNS + ".svc.cluster.local", Namespace: claimedNS})
		if err != nil {
			return err
		}
		defer s.Close()
		if err := s.Request(adsclient.TypeCLA, "outbound|80||web.scenario5.svc.cluster.local"); err != nil {
			return err
		}
		_, err = s.Recv(30 * time.Second)
		return err
	}
	// A proxy of the namespace, for its debug pages.
	pcc, err := grpc.NewClient(k.plain, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcc.Close()
	proxy, err := adsclient.Open(ctx, pcc, adsclient.Node{ID: "sidecar~10.30.0.9~web-x." + ns + "~" + ns + ".svc.cluster.local", Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	if err := proxy.Request(adsclient.TypeCLA, "outbound|80||web.scenario5.svc.cluster.local"); err != nil {
		t.Fatal(err)
	}
	if _, err := proxy.Recv(30 * time.Second); err != nil {
		t.Fatal(err)
	}
	// Debug endpoints from a non-loopback address: only with a valid token, and only what its
	// identity may read: the system namespace everything, another namespace the per-proxy pages
	// of its own proxies.
	system := "Bearer " + tokenOf("istio-system", "debugger", "istio-ca")
	own := "Bearer " + token("istio-ca")
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"no token", "/debug/registryz", "", http.StatusUnauthorized},
		{"bad token", "/debug/registryz", "Bearer garbage", http.StatusUnauthorized},
		{"the system namespace's token", "/debug/registryz", system, http.StatusOK},
		{"the system namespace's token, pprof", "/debug/pprof/", system, http.StatusOK},
		{"a namespace's token, the registry", "/debug/registryz", own, http.StatusForbidden},
		{"a namespace's token, pprof", "/debug/pprof/", own, http.StatusForbidden},
		{"a namespace's token, its proxy's CLAs", "/debug/edsz?proxyID=web-x." + ns, own, http.StatusOK},
		{"another namespace's token, this namespace's proxy", "/debug/edsz?proxyID=web-x." + ns, "Bearer " + tokenOf("default", "other", "istio-ca"), http.StatusNotFound},
	} {
		req := httptest.NewRequest(http.MethodGet, tc.path, nil)
		req.RemoteAddr = "192.0.2.10:5555"
		if tc.auth != "" {
			req.Header.Set("Authorization", tc.auth)
		}
		rec := httptest.NewRecorder()
		app.DebugHandler().ServeHTTP(rec, req)
		if rec.Code != tc.want {
			t.Errorf("debug from a remote peer, %s (%s): %d %s, want %d", tc.name, tc.path, rec.Code, rec.Body.String(), tc.want)
		}
	}

	for _, tc := range []struct {
		name, token, ns string
		want            codes.Code
	}{
		{"own namespace", token("istio-ca"), ns, codes.OK},
		{"another namespace", token("istio-ca"), "default", codes.PermissionDenied},
		{"wrong audience", token("other"), ns, codes.Unauthenticated},
		{"not a token", "garbage", ns, codes.Unauthenticated},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := status.Code(connect(tc.token, tc.ns)); got != tc.want {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}
