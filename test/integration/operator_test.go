package integration

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"istio.io/istio/pkg/cluster"
	"istio.io/istio/pkg/kube"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/krteds/krteds/outputs/xds/adsclient"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// tool finds a binary test/tools/build.sh builds from pinned modules (istioctl, helm). Where it
// is missing the test is skipped, unless KRTEDS_REQUIRE_TOOLS is set (.ci/run sets it): there a
// missing tool is a failure.
func tool(t *testing.T, name string) string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	tools := filepath.Join(filepath.Dir(file), "..", "tools")
	dir, err := exec.Command("bash", filepath.Join(tools, "bin.sh")).Output()
	if err != nil {
		t.Fatalf("test/tools/bin.sh: %v", err)
	}
	path := filepath.Join(strings.TrimSpace(string(dir)), name)
	if _, err := os.Stat(path); err != nil {
		if os.Getenv("KRTEDS_REQUIRE_TOOLS") != "" {
			t.Fatalf("%s is not built (%v): run test/tools/build.sh", name, err)
		}
		t.Skipf("%s is not built: run test/tools/build.sh", name)
	}
	return path
}

// run runs a tool with its own home, so that it reads and writes nothing of the user's.
func run(t *testing.T, env []string, bin string, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(bin, args...)
	cmd.Env = append([]string{"HOME=" + home, "PATH=/usr/bin:/bin", "XDG_CACHE_HOME=" + home, "XDG_CONFIG_HOME=" + home, "XDG_DATA_HOME=" + home}, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if err != nil {
		err = fmt.Errorf("%s %s: %w\n%s%s", filepath.Base(bin), strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String(), err
}

func chartDir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "deploy", "helm", "krteds")
}

// render is `helm template` of the chart into a namespace, decoded.
func render(t *testing.T, helm, ns string, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "krteds", chartDir(), "--namespace", ns}
	lint := []string{"lint", "--strict", chartDir()}
	for _, s := range set {
		args = append(args, "--set", s)
		lint = append(lint, "--set", s)
	}
	if _, err := run(t, nil, helm, lint...); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, nil, helm, args...)
	if err != nil {
		t.Fatal(err)
	}
	var objs []*unstructured.Unstructured
	dec := utilyaml.NewYAMLOrJSONDecoder(strings.NewReader(out), 4096)
	for {
		u := &unstructured.Unstructured{}
		if err := dec.Decode(&u.Object); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("decoding the rendered chart: %v\n%s", err, out)
		}
		if len(u.Object) > 0 {
			objs = append(objs, u)
		}
	}
	return objs
}

// apply server-side applies objects (dryRun: validated and admitted, not stored).
func apply(t *testing.T, c kube.Client, objs []*unstructured.Unstructured, dryRun bool) {
	t.Helper()
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(c.Kube().Discovery()))
	opts := metav1.PatchOptions{FieldManager: "krteds-chart-test", Force: new(bool)}
	*opts.Force = true
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	for _, u := range objs {
		gvk := u.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatalf("%s %s: %v", gvk, u.GetName(), err)
		}
		body, err := u.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var ri = c.Dynamic().Resource(m.Resource)
		var err2 error
		if m.Scope.Name() == meta.RESTScopeNameNamespace {
			_, err2 = ri.Namespace(u.GetNamespace()).Patch(context.Background(), u.GetName(), types.ApplyPatchType, body, opts)
		} else {
			_, err2 = ri.Patch(context.Background(), u.GetName(), types.ApplyPatchType, body, opts)
		}
		if err2 != nil {
			t.Errorf("applying %s %s/%s (dry run %t): %v", gvk.Kind, u.GetNamespace(), u.GetName(), dryRun, err2)
		}
	}
}

func ensureNamespace(t *testing.T, c kube.Client, ns string) {
	t.Helper()
	_, err := c.Kube().CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

func find(objs []*unstructured.Unstructured, kind string) *unstructured.Unstructured {
	for _, u := range objs {
		if u.GetKind() == kind {
			return u
		}
	}
	return nil
}

// TestHelmChart renders the chart with helm (built from its pinned module) with the default
// values and with the authenticated port, checks what each must hold, and applies both to the
// API server with a server-side dry run: every object validates and is admitted.
func TestHelmChart(t *testing.T) {
	needAPIServer(t)
	helm := tool(t, "helm")
	c := client(t)
	const ns = "krteds-chart"
	ensureNamespace(t, c, ns)
	ensureNamespace(t, c, "istio-system")

	t.Run("deploy/krteds.yaml is the default render", func(t *testing.T) {
		want, err := os.ReadFile(filepath.Join(chartDir(), "..", "..", "krteds.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		got, err := exec.Command("bash", filepath.Join(chartDir(), "..", "..", "render.sh"), helm).Output()
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Error("deploy/krteds.yaml differs from the chart's default render: run make manifests")
		}
	})
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"default", nil},
		{"tls", []string{"tls.enabled=true", "xds.plaintext.enabled=false"}},
		{"tls and plaintext, one replica, load reporting", []string{"tls.enabled=true", "replicaCount=1", "lrs.enabled=true", "lrs.interval=5s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := render(t, helm, ns, tc.set...)
			kinds := map[string]bool{}
			for _, u := range objs {
				kinds[u.GetKind()] = true
			}
			for _, k := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding", "Deployment", "Service", "NetworkPolicy"} {
				if !kinds[k] {
					t.Errorf("no %s rendered", k)
				}
			}
			tlsOn := slices.Contains(tc.set, "tls.enabled=true")
			plainOn := !slices.Contains(tc.set, "xds.plaintext.enabled=false")
			if got, want := kinds["PodDisruptionBudget"], !slices.Contains(tc.set, "replicaCount=1"); got != want {
				t.Errorf("PodDisruptionBudget rendered %t, want %t (only with more than one replica)", got, want)
			}

			dep := find(objs, "Deployment")
			pod, _, _ := unstructured.NestedMap(dep.Object, "spec", "template")
			if l, _, _ := unstructured.NestedString(pod, "metadata", "labels", "sidecar.istio.io/inject"); l != "false" {
				t.Errorf("pod label sidecar.istio.io/inject = %q, want \"false\"", l)
			}
			if tsc, _, _ := unstructured.NestedSlice(pod, "spec", "topologySpreadConstraints"); len(tsc) != 2 {
				t.Errorf("topologySpreadConstraints: %v", tsc)
			}
			containers, _, _ := unstructured.NestedSlice(pod, "spec", "containers")
			ctr := containers[0].(map[string]any)
			if ctr["imagePullPolicy"] != "IfNotPresent" {
				t.Errorf("imagePullPolicy %v", ctr["imagePullPolicy"])
			}
			for _, p := range []string{"startupProbe", "readinessProbe", "livenessProbe", "resources"} {
				if ctr[p] == nil {
					t.Errorf("container has no %s", p)
				}
			}
			if ro, _, _ := unstructured.NestedBool(ctr, "securityContext", "readOnlyRootFilesystem"); !ro {
				t.Error("root filesystem not read-only")
			}
			args, _, _ := unstructured.NestedStringSlice(ctr, "args")
			hasArg := func(a string) bool { return slices.Contains(args, a) }
			if hasArg("--xds-addr=:15010") != plainOn {
				t.Errorf("plaintext %t, args %v", plainOn, args)
			}
			for _, a := range []string{"--xds-tls-addr=:15012", "--tls-cert=/etc/krteds/tls/tls.crt", "--tls-key=/etc/krteds/tls/tls.key", "--tls-client-ca=/etc/krteds/tls/ca.crt", "--jwt-audience=istio-ca"} {
				if hasArg(a) != tlsOn {
					t.Errorf("tls %t but %s present %t (args %v)", tlsOn, a, hasArg(a), args)
				}
			}
			lrsOn := slices.Contains(tc.set, "lrs.enabled=true")
			if hasArg("--lrs") != lrsOn || hasArg("--lrs-interval=5s") != lrsOn {
				t.Errorf("lrs %t, args %v", lrsOn, args)
			}
			vols, _, _ := unstructured.NestedSlice(pod, "spec", "volumes")
			if (len(vols) == 1) != tlsOn {
				t.Errorf("tls %t, volumes %v", tlsOn, vols)
			}
			svcPorts, _, _ := unstructured.NestedSlice(find(objs, "Service").Object, "spec", "ports")
			var names []string
			for _, p := range svcPorts {
				names = append(names, p.(map[string]any)["name"].(string))
			}
			if slices.Contains(names, "grpc-xds") != plainOn || slices.Contains(names, "https-xds") != tlsOn {
				t.Errorf("service ports %v (plaintext %t, tls %t)", names, plainOn, tlsOn)
			}
			// The plaintext port admits only the configured peers; the others are open.
			rules, _, _ := unstructured.NestedSlice(find(objs, "NetworkPolicy").Object, "spec", "ingress")
			for _, r := range rules {
				rm := r.(map[string]any)
				port := rm["ports"].([]any)[0].(map[string]any)["port"]
				if _, restricted := rm["from"]; restricted != (fmt.Sprint(port) == "15010") {
					t.Errorf("network policy rule for port %v: from %v", port, rm["from"])
				}
			}
			var tokenReviews bool
			rulesCR, _, _ := unstructured.NestedSlice(find(objs, "ClusterRole").Object, "rules")
			for _, r := range rulesCR {
				if slices.Contains(r.(map[string]any)["resources"].([]any), any("tokenreviews")) {
					tokenReviews = true
				}
			}
			if !tokenReviews {
				t.Error("the ClusterRole does not allow creating TokenReviews")
			}
			apply(t, c, objs, true)
		})
	}
}

// TestChartRBACServesIstioctl installs the chart's objects for real, then runs krteds with the
// chart's service account and nothing else: it must sync, and check tokens with TokenReview on
// its authenticated port. istioctl, built from the Istio module krteds builds on, then reads
// krteds over xDS as it reads istiod: proxy-status over the plaintext port and with a token of
// the system namespace over the TLS port, the config dump a proxy-status diff compares, and a
// debug page through internal-debug.
func TestChartRBACServesIstioctl(t *testing.T) {
	needAPIServer(t)
	helm, istioctl := tool(t, "helm"), tool(t, "istioctl")
	admin := client(t)
	ctx := context.Background()
	const ns = "krteds-rbac"
	ensureNamespace(t, admin, ns)
	ensureNamespace(t, admin, "istio-system")
	apply(t, admin, render(t, helm, ns, "tls.enabled=true"), false)
	mesh(t, admin, "scenario-istioctl", 2)

	// What the chart's service account may do, as the API server's authorizer answers.
	sa := "system:serviceaccount:" + ns + ":krteds"
	for _, tc := range []struct {
		attrs authzv1.ResourceAttributes
		want  bool
	}{
		{authzv1.ResourceAttributes{Group: "authentication.k8s.io", Resource: "tokenreviews", Verb: "create"}, true},
		{authzv1.ResourceAttributes{Resource: "pods", Verb: "watch"}, true},
		{authzv1.ResourceAttributes{Group: "discovery.k8s.io", Resource: "endpointslices", Verb: "list"}, true},
		{authzv1.ResourceAttributes{Group: "networking.istio.io", Resource: "workloadentries", Verb: "watch"}, true},
		{authzv1.ResourceAttributes{Group: "security.istio.io", Resource: "peerauthentications", Verb: "list"}, true},
		{authzv1.ResourceAttributes{Group: "security.istio.io", Resource: "peerauthentications", Verb: "watch"}, true},
		{authzv1.ResourceAttributes{Group: "security.istio.io", Resource: "peerauthentications", Verb: "create"}, false},
		{authzv1.ResourceAttributes{Namespace: "istio-system", Resource: "secrets", Verb: "watch"}, true},
		{authzv1.ResourceAttributes{Namespace: ns, Resource: "secrets", Verb: "list"}, false},
		{authzv1.ResourceAttributes{Resource: "pods", Verb: "create"}, false},
		{authzv1.ResourceAttributes{Group: "networking.istio.io", Resource: "destinationrules", Verb: "update"}, false},
	} {
		sar, err := admin.Kube().AuthorizationV1().SubjectAccessReviews().Create(ctx, &authzv1.SubjectAccessReview{Spec: authzv1.SubjectAccessReviewSpec{
			User: sa, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns}, ResourceAttributes: &tc.attrs}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if sar.Status.Allowed != tc.want {
			t.Errorf("%s may %s %s/%s in %q: %t, want %t", sa, tc.attrs.Verb, tc.attrs.Group, tc.attrs.Resource, tc.attrs.Namespace, sar.Status.Allowed, tc.want)
		}
	}

	// krteds as the chart's service account.
	tr, err := admin.Kube().CoreV1().ServiceAccounts(ns).CreateToken(ctx, "krteds", &authnv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	adminRC, err := kube.DefaultRestConfig(kubeconfig, "")
	if err != nil {
		t.Fatal(err)
	}
	saRC := rest.AnonymousClientConfig(adminRC)
	saRC.BearerToken = tr.Status.Token
	asSA, err := kube.NewClient(kube.NewClientConfigForRestConfig(saRC), cluster.ID("Kubernetes"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("POD_NAME", "krteds-integration-0") // as the chart sets it: istioctl shows it
	k := startSecureKrteds(t, asSA)
	app, plain, secure := k.app, k.plain, k.secure
	stop := make(chan struct{})
	defer close(stop)
	synced := make(chan bool, 1)
	go func() { synced <- app.WaitUntilSynced(stop) }()
	select {
	case ok := <-synced:
		if !ok {
			t.Fatal("krteds did not sync as the chart's service account")
		}
	case <-time.After(60 * time.Second):
		t.Fatal("krteds as the chart's service account has not synced in 60 s: its RBAC lacks something (see the informer errors above)")
	}

	// A proxy that has its endpoints: what istioctl will report on.
	cc, err := adsclient.Dial(plain)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	proxyID := "sidecar~10.40.0.7~client.scenario-istioctl~scenario-istioctl.svc.cluster.local"
	s, err := adsclient.Open(ctx, cc, adsclient.Node{ID: proxyID, Namespace: "scenario-istioctl", IstioVersion: "1.31.0"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const cla = "outbound|80||web.scenario-istioctl.svc.cluster.local"
	_ = s.Request(adsclient.TypeCluster)
	_ = s.Request(adsclient.TypeCLA, cla)
	var cds *discovery.DiscoveryResponse
	for acked := map[string]bool{}; len(acked) < 2; {
		resp, err := s.Recv(30 * time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if resp.TypeUrl == adsclient.TypeCluster {
			cds = resp
		}
		names := []string{}
		if resp.TypeUrl == adsclient.TypeCLA {
			names = []string{cla}
		}
		if err := s.Ack(resp, names...); err != nil {
			t.Fatal(err)
		}
		acked[resp.TypeUrl] = true
	}
	// A barrier: the stream handles requests in order, so the answer to one more proves both
	// ACKs applied before istioctl looks.
	if err := s.Request(xdsdebug.TypeDebugSyncz); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Recv(30 * time.Second); err != nil {
		t.Fatal(err)
	}

	// istioctl's kubeconfig: the admin's (it creates the system namespace's token from it).
	kc := writeKubeconfig(t, adminRC)
	env := []string{"KUBECONFIG=" + kc}
	// istioctl asks for a token of the system namespace's default service account.
	if _, err := admin.Kube().CoreV1().ServiceAccounts("istio-system").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"plaintext", []string{"proxy-status", "--xds-address", plain, "--plaintext"}},
		// A token of istio-system/default with audience istio-ca, over TLS, as against istiod's 15012.
		{"token", []string{"proxy-status", "--xds-address", secure}},
	} {
		out, err := run(t, env, istioctl, tc.args...)
		t.Logf("istioctl %s:\n%s", strings.Join(tc.args, " "), out)
		if err != nil {
			t.Errorf("istioctl proxy-status, %s: %v", tc.name, err)
		}
		if !regexp.MustCompile(`client\.scenario-istioctl\s+Kubernetes\s+krteds-integration-0\s+1\.31\.0\s+2 \(CDS,EDS\)`).MatchString(out) {
			t.Errorf("istioctl proxy-status, %s, should show the proxy, its cluster, krteds, its version and its two types:\n%s", tc.name, out)
		}
	}

	// proxy-status <proxy> diffs krteds' config dump of the proxy against the proxy's own: the
	// one an Envoy holding what the client above received would show.
	clusters := &adminv3.ClustersConfigDump{}
	for _, a := range cds.Resources {
		clusters.DynamicActiveClusters = append(clusters.DynamicActiveClusters, &adminv3.ClustersConfigDump_DynamicCluster{VersionInfo: cds.VersionInfo, Cluster: a})
	}
	dump := &adminv3.ConfigDump{}
	for _, m := range []proto.Message{clusters, &adminv3.ListenersConfigDump{}, &adminv3.RoutesConfigDump{}} {
		a, err := anypb.New(m)
		if err != nil {
			t.Fatal(err)
		}
		dump.Configs = append(dump.Configs, a)
	}
	b, err := protojson.Marshal(dump)
	if err != nil {
		t.Fatal(err)
	}
	envoyDump := filepath.Join(t.TempDir(), "envoy-config-dump.json")
	if err := os.WriteFile(envoyDump, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := run(t, env, istioctl, "proxy-status", "client.scenario-istioctl", "--file", envoyDump,
		"--xds-address", plain, "--plaintext")
	t.Logf("istioctl proxy-status client.scenario-istioctl --file …:\n%s", out)
	if err != nil || !strings.Contains(out, "Clusters Match") || !strings.Contains(out, "Listeners Match") || !strings.Contains(out, "Routes Match") {
		t.Errorf("istioctl's diff of the proxy's config dump against krteds': %v", err)
	}
	// One cluster less on the proxy: the diff shows it.
	clusters.DynamicActiveClusters = clusters.DynamicActiveClusters[1:]
	dump.Configs[0], _ = anypb.New(clusters)
	b, _ = protojson.Marshal(dump)
	if err := os.WriteFile(envoyDump, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = run(t, env, istioctl, "proxy-status", "client.scenario-istioctl", "--file", envoyDump,
		"--xds-address", plain, "--plaintext")
	if !strings.Contains(out, "Clusters Don't Match") {
		t.Errorf("istioctl's diff does not see a cluster missing on the proxy:\n%s", out)
	}

	out, err = run(t, env, istioctl, "x", "internal-debug", "connections", "--xds-address", plain, "--plaintext")
	t.Logf("istioctl x internal-debug connections:\n%s", out)
	if err != nil || !strings.Contains(out, "10.40.0.7") {
		t.Errorf("internal-debug connections does not list the proxy: %v", err)
	}
}

// writeKubeconfig writes a kubeconfig file for a rest config.
func writeKubeconfig(t *testing.T, rc *rest.Config) string {
	t.Helper()
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["c"] = &clientcmdapi.Cluster{Server: rc.Host, CertificateAuthorityData: rc.CAData, CertificateAuthority: rc.CAFile, InsecureSkipTLSVerify: rc.Insecure}
	cfg.AuthInfos["u"] = &clientcmdapi.AuthInfo{Token: rc.BearerToken, TokenFile: rc.BearerTokenFile, ClientCertificateData: rc.CertData, ClientKeyData: rc.KeyData,
		ClientCertificate: rc.CertFile, ClientKey: rc.KeyFile}
	cfg.Contexts["x"] = &clientcmdapi.Context{Cluster: "c", AuthInfo: "u"}
	cfg.CurrentContext = "x"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}
