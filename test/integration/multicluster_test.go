package integration

import (
	"context"
	"net"
	"os"
	"strconv"
	"testing"

	krteds "github.com/krteds/krteds/cmd/krteds/app"
	"github.com/krteds/krteds/collections"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections/sources"
	"github.com/krteds/krteds/test/fixtures"
)

// startSecondAPIServer starts another etcd, kube-apiserver and EndpointSlice controller, a
// second cluster, and returns its kubeconfig's path; it is stopped when the test ends.
func startSecondAPIServer(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	env := append(os.Environ(), "BIN_DIR="+binDir(), "WORKDIR="+dir, "START_KCM=1",
		"ETCD_PORT="+strconv.Itoa(fixtures.FreePort(t)), "ETCD_PEER_PORT="+strconv.Itoa(fixtures.FreePort(t)),
		"APISERVER_PORT="+strconv.Itoa(fixtures.FreePort(t)), "KCM_PORT="+strconv.Itoa(fixtures.FreePort(t)),
		"ETCD_EXTRA_ARGS=--unsafe-no-fsync", "ADMIN_TOKEN=krteds-remote-"+strconv.Itoa(os.Getpid()))
	saved := startEnv
	startEnv = env
	kc, err := startAPIServer()
	startEnv = saved
	t.Cleanup(func() {
		saved := workdir
		workdir = dir
		stopAPIServer()
		workdir = saved
	})
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// TestRemoteClusterBySecret: krteds serves the local cluster; a second API server is added as a
// remote cluster by a Secret while a client follows a Service both clusters have: the client
// gets both clusters' endpoints, then, when the Secret goes, the local ones alone.
func TestRemoteClusterBySecret(t *testing.T) {
	needAPIServer(t)
	remoteKubeconfig := startSecondAPIServer(t)
	local := client(t)
	mesh(t, local, "mc", 1)
	remote := clientOf(t, remoteKubeconfig)
	mesh(t, remote, "mc", 2)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := local.Kube().CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "istio-system"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app, err := krteds.Start(krteds.Options{Config: collections.DefaultConfig(), Cluster: client(t), ClusterSecrets: true, XDSListener: lis})
	if err != nil {
		t.Fatal(err)
	}
	defer app.Stop()
	w := newWatcher()
	go follow(ctx, func() string { return lis.Addr().String() }, "outbound|80||web.mc.svc.cluster.local", w)
	waitHealthy(t, w, ips(0))

	kc, err := os.ReadFile(remoteKubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "remote", Namespace: "istio-system",
		Labels: map[string]string{sources.LabelMultiCluster: "true"}}, Data: map[string][]byte{"remote-1": kc}}
	if _, err := local.Kube().CoreV1().Secrets("istio-system").Create(ctx, secret, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Both clusters' pods: the remote's 10.20.0.1 is an endpoint of its own.
	waitHealthy(t, w, []string{"10.20.0.1", "10.20.0.1", "10.20.0.2"})

	if err := local.Kube().CoreV1().Secrets("istio-system").Delete(ctx, "remote", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, w, ips(0))
}
