package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	networking "istio.io/api/networking/v1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// installCRD installs a networking.istio.io/v1 CRD (schema left open, as a stand-in for Istio's
// own) and waits until the API server serves it.
func installCRD(t *testing.T, c kube.Client, kind, plural string) {
	t.Helper()
	ctx := context.Background()
	crd := &apiextensions.CustomResourceDefinition{
		ObjectMeta: metav1.ObjectMeta{Name: plural + ".networking.istio.io"},
		Spec: apiextensions.CustomResourceDefinitionSpec{
			Group: "networking.istio.io",
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
