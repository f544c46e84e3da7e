package integration

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/krteds/krteds/test/fixtures"
	networking "istio.io/api/networking/v1"
	securityapi "istio.io/api/security/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// installCRD installs a networking.istio.io/v1 CRD (schema left open, as a stand-in for Istio's
// own) and waits until the API server serves it.
func installCRD(t *testing.T, c kube.Client, kind, plural string) {
	t.Helper()
	installCRDOf(t, c, "networking.istio.io", kind, plural)
}

// installCRDOf installs a v1 CRD of the group, as installCRD does.
func installCRDOf(t *testing.T, c kube.Client, group, kind, plural string) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensions.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + "." + group},
		Spec: apiextensions.CustomResourceDefinitionSpec{
			Group: group,
			Names: apiextensions.CustomResourceDefinitionNames{Kind: kind, ListKind: kind + "List", Plural: plural, Singular: plural[:len(plural)-1]},
			Scope: apiextensions.NamespaceScoped,
			Versions: []apiextensions.CustomResourceDefinitionVersion{{
				Name: "v1", Served: true, Storage: true,
				Subresources: &apiextensions.CustomResourceSubresources{Status: &apiextensions.CustomResourceSubresourceStatus{}},
				Schema: &apiextensions.CustomResourceValidation{OpenAPIV3Schema: &apiextensions.JSONSchemaProps{
					Type: "object", XPreserveUnknownFields: new(bool),
				}},
			}},
		},
	}
	*crd.Spec.Versions[0].Schema.OpenAPIV3Schema.XPreserveUnknownFields = true
	if _, err := c.Ext().ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	apiServer.Await(t, 30*time.Second, "CRD "+crd.Name+" established", func() (bool, string) {
		got, err := c.Ext().ApiextensionsV1().CustomResourceDefinitions().Get(ctx, crd.Name, metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		for _, cond := range got.Status.Conditions {
			if cond.Type == apiextensions.Established && cond.Status == apiextensions.ConditionTrue {
				return true, ""
			}
		}
		return false, fmt.Sprint(got.Status.Conditions)
	})
}

// TestWorkloadEntriesFromTheCluster: krteds starts before Istio's CRDs exist; once they are
// installed it reads WorkloadEntries and ServiceEntries from the API server: a Service gains the
// WorkloadEntry its selector picks, a ServiceEntry serves the Pod and the WorkloadEntry it
// selects, and a failing health check removes the entry from both.
func TestWorkloadEntriesFromTheCluster(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	const ns = "scenario-vm"
	mesh(t, c, ns, 1)
	app, addr := startKrteds(t, "127.0.0.1:0")
	defer app.Stop()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	web, vms := newWatcher(), newWatcher()
	go follow(ctx, func() string { return addr }, "outbound|80||web."+ns+".svc.cluster.local", web)
	go follow(ctx, func() string { return addr }, "outbound|80||vm."+ns+".example", vms)
	waitHealthy(t, web, ips(0))

	installCRD(t, c, "WorkloadEntry", "workloadentries")
	installCRD(t, c, "ServiceEntry", "serviceentries")
	we := &networkingclient.WorkloadEntry{ObjectMeta: metav1.ObjectMeta{Name: "vm-1", Namespace: ns},
		Spec: networking.WorkloadEntry{Address: "10.20.9.1", Labels: map[string]string{"app": "web"}}}
	var err error
	// The CRD watcher may not have started the informer yet; creating the object is enough, the
	// informer lists it when it starts.
	if we, err = c.Istio().NetworkingV1().WorkloadEntries(ns).Create(ctx, we, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, web, []string{"10.20.0.1", "10.20.9.1"})

	se := &networkingclient.ServiceEntry{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: ns},
		Spec: networking.ServiceEntry{Hosts: []string{"vm." + ns + ".example"}, Resolution: networking.ServiceEntry_STATIC,
			Ports:            []*networking.ServicePort{{Number: 80, Name: "http", Protocol: "HTTP"}},
			WorkloadSelector: &networking.WorkloadSelector{Labels: map[string]string{"app": "web"}}}}
	if _, err := c.Istio().NetworkingV1().ServiceEntries(ns).Create(ctx, se, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, vms, []string{"10.20.0.1", "10.20.9.1"})

	// Health checks turn on and fail: the entry leaves both services.
	we.Annotations = map[string]string{"proxy.istio.io/health-checks-enabled": "true"}
	if we, err = c.Istio().NetworkingV1().WorkloadEntries(ns).Update(ctx, we, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitHealthy(t, web, ips(0))
	waitHealthy(t, vms, ips(0))
}

// tlsModes lists the tlsMode metadata ("-" for none) of the latest CLA's endpoints.
func (w *watcher) tlsModes() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return fixtures.TLSModes(w.latest)
}

func waitTLSModes(t *testing.T, w *watcher, want ...string) {
	t.Helper()
	w.received.Await(t, 60*time.Second, fmt.Sprintf("tlsModes %v", want), func() (bool, string) {
		got := w.tlsModes()
		return slices.Equal(got, want), fmt.Sprintf("tlsModes %v", got)
	})
}

// TestPeerAuthenticationsFromTheCluster: krteds starts before the PeerAuthentication CRD exists;
// once it is installed, a namespace-wide policy read from the API server disables mTLS for the
// namespace's injected Pod (its endpoint loses tlsMode istio), STRICT brings it back, and so does
// deleting a DISABLE.
func TestPeerAuthenticationsFromTheCluster(t *testing.T) {
	needAPIServer(t)
	c := client(t)
	const ns = "scenario-peerauth"
	mesh(t, c, ns, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pod, err := c.Kube().CoreV1().Pods(ns).Get(ctx, podName(0), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Labels["security.istio.io/tlsMode"] = "istio"
	if _, err := c.Kube().CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	app, addr := startKrteds(t, "127.0.0.1:0")
	defer app.Stop()
	w := newWatcher()
	go follow(ctx, func() string { return addr }, "outbound|80||web."+ns+".svc.cluster.local", w)
	waitTLSModes(t, w, "10.20.0.1=istio")

	installCRDOf(t, c, "security.istio.io", "PeerAuthentication", "peerauthentications")
	pa := &securityclient.PeerAuthentication{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns},
		Spec: securityapi.PeerAuthentication{Mtls: &securityapi.PeerAuthentication_MutualTLS{Mode: securityapi.PeerAuthentication_MutualTLS_DISABLE}}}
	if pa, err = c.Istio().SecurityV1().PeerAuthentications(ns).Create(ctx, pa, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTLSModes(t, w, "10.20.0.1=-")

	pa.Spec.Mtls.Mode = securityapi.PeerAuthentication_MutualTLS_STRICT
	if pa, err = c.Istio().SecurityV1().PeerAuthentications(ns).Update(ctx, pa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTLSModes(t, w, "10.20.0.1=istio")

	pa.Spec.Mtls.Mode = securityapi.PeerAuthentication_MutualTLS_DISABLE
	if _, err = c.Istio().SecurityV1().PeerAuthentications(ns).Update(ctx, pa, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTLSModes(t, w, "10.20.0.1=-")
	if err := c.Istio().SecurityV1().PeerAuthentications(ns).Delete(ctx, pa.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTLSModes(t, w, "10.20.0.1=istio")
}
