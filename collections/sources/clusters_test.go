package sources

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/pem"
	"fmt"
	"maps"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
)

func waitClusters(t *testing.T, r *RemoteClusters, want ...string) {
	t.Helper()
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, r.Collection())
	w.Await(t, 10*time.Second, fmt.Sprintf("clusters %v", want), func() (bool, string) {
		var got []string
		for _, c := range r.Collection().List() {
			got = append(got, c.ID)
		}
		return len(got) == len(want) && (len(want) == 0 || got[0] == want[0]), fmt.Sprintf("clusters %v", got)
	})
}

// TestRemoteClustersJoinWhenSyncedAndLeave: a remote cluster read from a folder joins once read;
// one whose API server never answers never joins and holds nothing back; a removed cluster
// leaves and its collections stop.
func TestRemoteClustersJoinWhenSyncedAndLeave(t *testing.T) {
	stop := test.NewStop(t)
	r := NewRemoteClusters(krt.NewOptionsBuilder(stop, "", nil), "Kubernetes", nil)
	if err := r.AddManifests("Kubernetes", t.TempDir()); err == nil {
		t.Fatal("a remote cluster may not take the local cluster's ID")
	}
	// An API server that never answers.
	dead, err := kube.NewClient(kube.NewClientConfigForRestConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}), cluster.ID("dead"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddClient("dead", dead, "test"); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svcYAML("ns1", "svc", 80)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.AddManifests("east", dir); err != nil {
		t.Fatal(err)
	}
	waitClusters(t, r, "east")
	c := *r.Collection().GetKey("east")
	if got := len(c.Inputs.Services.List()); got != 1 {
		t.Fatalf("east has %d services", got)
	}
	// The dead cluster had as long as east to sync; it is still out.
	if r.Collection().GetKey("dead") != nil {
		t.Fatal("an unsynced cluster joined")
	}
	r.Remove("east")
	waitClusters(t, r)
	select {
	case <-c.Stop:
	default:
		t.Fatal("a removed cluster's collections keep running")
	}
	r.Remove("dead")
}

// TestRemoteClusterKeepsServingWhileItRestarts: a cluster started again (a new kubeconfig) keeps
// the one serving until it has synced: a restart that never syncs leaves the old one in place.
func TestRemoteClusterKeepsServingWhileItRestarts(t *testing.T) {
	stop := test.NewStop(t)
	r := NewRemoteClusters(krt.NewOptionsBuilder(stop, "", nil), "Kubernetes", nil)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "svc.yaml"), []byte(svcYAML("ns1", "svc", 80)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.AddManifests("east", dir); err != nil {
		t.Fatal(err)
	}
	waitClusters(t, r, "east")
	first := *r.Collection().GetKey("east")
	dead, err := kube.NewClient(kube.NewClientConfigForRestConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second}), cluster.ID("east"))
	if err != nil {
		t.Fatal(err)
	}
	if err := r.AddClient("east", dead, "test"); err != nil {
		t.Fatal(err)
	}
	// A third start that syncs: when it is in the collection, the restart that never synced had
	// as long, and the first must have served until then.
	dir2 := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir2, "svc.yaml"), []byte(svcYAML("ns1", "svc", 81)+"---\n"+svcYAML("ns1", "other", 82)), 0o644); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Stop:
		t.Fatal("the serving cluster stopped when a restart began")
	default:
	}
	if got := r.Collection().GetKey("east"); got == nil || (*got) != first {
		t.Fatal("the serving cluster left the collection when a restart began")
	}
	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, r.Collection())
	if err := r.AddManifests("east", dir2); err != nil {
		t.Fatal(err)
	}
	w.Await(t, 10*time.Second, "the restarted cluster replaces the serving one", func() (bool, string) {
		c := r.Collection().GetKey("east")
		return c != nil && len((*c).Inputs.Services.List()) == 2, "still the first"
	})
	select {
	case <-first.Stop:
	case <-time.After(5 * time.Second):
		t.Fatal("the replaced cluster's collections keep running")
	}
	r.Remove("east")
	waitClusters(t, r)
}

// kubeconfig is a kubeconfig of one cluster and one user, with the cluster and user fields given.
func kubeconfig(cluster, user string) string {
	return `apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://127.0.0.1:1
` + cluster + `contexts:
- name: ctx
  context: {cluster: c, user: u}
current-context: ctx
users:
- name: u
  user:
` + user
}

// untrustedKubeconfigs are kubeconfigs a cluster Secret might hold, by cluster ID, and what the
// error of each must say: only "clean" (credentials and CA inline) may start its cluster. The
// files named exist and hold what they should (a token, a certificate and its key, a CA), so
// that nothing but the rules refuses them.
func untrustedKubeconfigs(t *testing.T) (configs, want map[string]string) {
	dir := t.TempDir()
	cert, key := testCA(t)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	token, certFile, keyFile := write("token", []byte("abc")), write("cert.pem", cert), write("key.pem", key)
	b64 := base64.StdEncoding.EncodeToString
	ca := "    certificate-authority-data: " + b64(cert) + "\n"
	configs = map[string]string{
		"clean":         kubeconfig(ca, "    token: abc\n"),
		"clean-cert":    kubeconfig(ca, "    client-certificate-data: "+b64(cert)+"\n    client-key-data: "+b64(key)+"\n"),
		"exec":          kubeconfig(ca, "    exec: {apiVersion: client.authentication.k8s.io/v1, command: /bin/true, interactiveMode: Never}\n"),
		"auth-provider": kubeconfig(ca, "    auth-provider: {name: gcp, config: {cmd-path: /bin/sh}}\n"),
		"oidc":          kubeconfig(ca, "    auth-provider: {name: oidc, config: {idp-issuer-url: 'https://127.0.0.1:2', client-id: 'x', refresh-token: 'y'}}\n"),
		"token-file":    kubeconfig(ca, "    tokenFile: "+token+"\n"),
		"client-cert":   kubeconfig(ca, "    client-certificate: "+certFile+"\n    client-key-data: "+b64(key)+"\n"),
		"client-key":    kubeconfig(ca, "    client-certificate-data: "+b64(cert)+"\n    client-key: "+keyFile+"\n"),
		"ca-file":       kubeconfig("    certificate-authority: "+certFile+"\n", "    token: abc\n"),
	}
	want = map[string]string{
		"exec": "exec plugin", "auth-provider": "auth provider", "oidc": "auth provider", "token-file": "token file",
		"client-cert": "client certificate file", "client-key": "client key file", "ca-file": "certificate authority file",
	}
	return configs, want
}

// testCA is a self-signed CA certificate and its key, PEM encoded.
func testCA(t *testing.T) (cert, key []byte) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test-ca"}, IsCA: true, BasicConstraintsValid: true,
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &k.PublicKey, k)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// TestClientOfUntrustedKubeconfig: a cluster Secret's kubeconfig may not run a command, use an
// auth provider or name a file; the operator's kubeconfig (the trusted constructor) may.
func TestClientOfUntrustedKubeconfig(t *testing.T) {
	configs, want := untrustedKubeconfigs(t)
	for _, id := range slices.Sorted(maps.Keys(configs)) {
		_, err := ClientOfUntrustedKubeconfig(id, []byte(configs[id]))
		switch {
		case want[id] == "" && err != nil:
			t.Errorf("%s: %v", id, err)
		case want[id] != "" && (err == nil || !strings.Contains(err.Error(), want[id]) || !strings.Contains(err.Error(), "kubeconfig of "+id)):
			t.Errorf("%s: got error %v, want one naming the key and %q", id, err, want[id])
		}
	}
	if _, err := ClientOfUntrustedKubeconfig("empty", nil); err == nil {
		t.Error("an empty kubeconfig made a client")
	}
	if _, err := ClientOfTrustedKubeconfig("token-file", []byte(configs["token-file"])); err != nil {
		t.Errorf("the trusted constructor refused a token file: %v", err)
	}
}

// TestClusterSecretsKubeconfigsAreSanitised: through the Secret path, with its default client
// constructor, only the clean kubeconfig starts a cluster; every other key is logged with the
// Secret and the key, and listed in the Secret's problems, which clear once it is fixed.
func TestClusterSecretsKubeconfigsAreSanitised(t *testing.T) {
	stop := test.NewStop(t)
	core, logs := observer.New(zap.InfoLevel)
	r := NewRemoteClusters(krt.NewOptionsBuilder(stop, "", nil), "Kubernetes", zap.New(core))
	var watched []krt.Collection[collections.ObjectProblems]
	r.OnFileProblems = func(c krt.Collection[collections.ObjectProblems]) { watched = append(watched, c) }
	configs, want := untrustedKubeconfigs(t)
	secret := &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "remotes", Namespace: "istio-system", Labels: map[string]string{LabelMultiCluster: "true"}},
		Data:       map[string][]byte{},
	}
	for id, kc := range configs {
		secret.Data[id] = []byte(kc)
	}
	local := kube.NewFakeClient(secret)
	r.WatchSecrets(local, "istio-system", nil)
	local.RunAndWait(stop)
	if len(watched) != 1 || watched[0] != krt.Collection[collections.ObjectProblems](r.SecretProblems()) {
		t.Fatal("the Secret problems were not handed to OnFileProblems")
	}

	w := fixtures.NewWaker()
	fixtures.WakeOn(t, w, r.SecretProblems())
	key := KindClusterSecret + "/istio-system/remotes"
	w.Await(t, 10*time.Second, "the Secret's problems", func() (bool, string) {
		p := r.SecretProblems().GetKey(key)
		return p != nil, "none yet"
	})
	// The problems are written once every key of the Secret has been handled.
	p := *r.SecretProblems().GetKey(key)
	got := map[string]string{}
	for _, pr := range p.Problems {
		id, _, _ := strings.Cut(strings.TrimPrefix(pr.Detail, `key "`), `"`)
		got[id] = pr.Detail
		if pr.Reason != ReasonInvalidKubeconfig || pr.Kind != KindClusterSecret || pr.Object != "istio-system/remotes" {
			t.Errorf("problem %+v", pr)
		}
	}
	for id, w := range want {
		if !strings.Contains(got[id], w) {
			t.Errorf("%s: problem %q, want one saying %q", id, got[id], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("problems for %v, want %v", slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(want)))
	}
	r.mu.Lock()
	started := slices.Sorted(maps.Keys(r.running))
	r.mu.Unlock()
	if !slices.Equal(started, []string{"clean", "clean-cert"}) {
		t.Errorf("clusters started: %v, want only the clean ones", started)
	}
	for id := range want {
		found := false
		for _, e := range logs.FilterMessage("remote cluster not started").All() {
			f := e.ContextMap()
			found = found || (f["key"] == id && f["secret"] == "istio-system/remotes")
		}
		if !found {
			t.Errorf("%s: no log line naming the Secret and the key", id)
		}
	}

	// Fixed: the bad keys removed, the problems go.
	fixed := secret.DeepCopy()
	fixed.Data = map[string][]byte{"clean": []byte(configs["clean"]), "clean-cert": []byte(configs["clean-cert"])}
	if _, err := local.Kube().CoreV1().Secrets("istio-system").Update(context.Background(), fixed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	w.Await(t, 10*time.Second, "the problems to clear", func() (bool, string) {
		return r.SecretProblems().GetKey(key) == nil, "still there"
	})
}
