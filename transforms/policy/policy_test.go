package policy

import (
	"slices"
	"testing"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
)

// ServicePolicies finds, through the host index, every rule whose host covers the service: its
// exact host, a short name resolved in the rule's namespace, and wildcards at any level, including
// one without a dot after the star; not the others.
func TestServicePoliciesFindRulesByHost(t *testing.T) {
	stop := test.NewStop(t)
	cfg := collections.DefaultConfig()
	rule := func(ns, name, host string) collections.DestinationRule {
		return collections.DestinationRule{Name: name, Namespace: ns, Host: host}
	}
	rules := krt.NewStaticCollection(nil, []collections.DestinationRule{
		rule("ns1", "exact", "foo.ns1.svc.cluster.local"),
		rule("ns1", "short", "foo"),
		rule("ns2", "short-elsewhere", "foo"),
		rule("ns1", "namespace", "*.ns1.svc.cluster.local"),
		rule("istio-system", "mesh", "*.svc.cluster.local"),
		rule("istio-system", "everything", "*"),
		rule("ns1", "undotted", "*oo.ns1.svc.cluster.local"),
		rule("ns1", "other-namespace", "*.ns2.svc.cluster.local"),
		rule("ns1", "other-host", "bar.ns1.svc.cluster.local"),
		rule("ns1", "external", "*.example.com"),
	}, krt.WithStop(stop))
	byHost := krt.NewIndex[string, collections.DestinationRule](rules, "byHost", RuleHostKeys(cfg))
	fn := ServicePolicies(rules, byHost).Fn
	svc := &collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local"}
	sp := fn(krt.TestingDummyContext{}, svc)
	var got []string
	for _, r := range sp.Rules {
		got = append(got, r.Name)
	}
	slices.Sort(got)
	want := []string{"everything", "exact", "mesh", "namespace", "short", "undotted"}
	if !slices.Equal(got, want) {
		t.Fatalf("rules %v, want %v", got, want)
	}
}
