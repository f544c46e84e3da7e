package policy

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
	networking "istio.io/api/networking/v1"
	typev1beta1 "istio.io/api/type/v1beta1"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/transformtest"
)

func drTestBool(b bool) *bool { return &b }

func TestConvertDestinationRule(t *testing.T) {
	cases := []struct {
		name string
		in   *networkingclient.DestinationRule
		want *collections.DestinationRule
		// reasons of the reported problems; the detail must contain detail when set.
		reasons []string
		detail  string
	}{
		{
			name: "nil",
			in:   nil,
		},
		{
			name: "host only",
			in: &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "r"), Spec: networking.DestinationRule{
				Host: "reviews",
			}},
			want: &collections.DestinationRule{Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated, Host: "reviews"},
		},
		{
			name: "every honoured field",
			in: &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "r"), Spec: networking.DestinationRule{
				Host:     "reviews.ns1.svc.cluster.local",
				ExportTo: []string{"ns2", ".", "ns3"},
				TrafficPolicy: &networking.TrafficPolicy{
					OutlierDetection: &networking.OutlierDetection{MinHealthPercent: 30, Interval: durationpb.New(time.Second)},
					LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
						Enabled: wrapperspb.Bool(true),
						Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{
							{From: "r1/z1/*", To: map[string]uint32{"r1/z1/*": 80, "r2/*": 20}},
						},
					}},
					Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_ISTIO_MUTUAL},
					PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
						{Port: &networking.PortSelector{Number: 80}, Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_DISABLE}},
						{Port: &networking.PortSelector{Number: 80}, OutlierDetection: &networking.OutlierDetection{}},
						{Port: &networking.PortSelector{Number: 9090}, LoadBalancer: &networking.LoadBalancerSettings{
							LbPolicy: &networking.LoadBalancerSettings_Simple{Simple: networking.LoadBalancerSettings_ROUND_ROBIN},
						}},
					},
				},
				Subsets: []*networking.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"}, TrafficPolicy: &networking.TrafficPolicy{
						LoadBalancer: &networking.LoadBalancerSettings{LocalityLbSetting: &networking.LocalityLoadBalancerSetting{
							Failover:         []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
							FailoverPriority: []string{"topology.istio.io/network"},
						}},
						PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
							{Port: &networking.PortSelector{Number: 80}, Tls: &networking.ClientTLSSettings{Mode: networking.ClientTLSSettings_SIMPLE}},
						},
					}},
				},
			}},
			want: &collections.DestinationRule{
				Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated,
				Host:     "reviews.ns1.svc.cluster.local",
				ExportTo: []string{".", "ns2", "ns3"},
				Policy: &collections.TrafficPolicy{
					OutlierDetection: true, MinHealthPercent: 30, LoadBalancer: true, TLSMode: collections.ClientTLSIstioMutual,
					Outlier: &collections.OutlierSettings{Interval: collections.Duration{Seconds: 1, Set: true}},
					Locality: &collections.LocalitySetting{
						Enabled:    drTestBool(true),
						Distribute: []collections.Distribute{{From: "r1/z1/*", To: map[string]uint32{"r1/z1/*": 80, "r2/*": 20}}},
					},
				},
				PortPolicies: map[uint32]*collections.TrafficPolicy{
					80:   {TLSMode: collections.ClientTLSDisable},
					9090: {LoadBalancer: true, Algorithm: &collections.LBAlgorithm{Simple: "ROUND_ROBIN"}},
				},
				Subsets: []collections.Subset{
					{Name: "v1", Labels: map[string]string{"version": "v1"}},
					{Name: "v2", Labels: map[string]string{"version": "v2"},
						Policy: &collections.TrafficPolicy{LoadBalancer: true, Locality: &collections.LocalitySetting{
							Failover:         []collections.Failover{{From: "r1", To: "r2"}},
							FailoverPriority: []string{"topology.istio.io/network"},
						}},
						PortPolicies: map[uint32]*collections.TrafficPolicy{80: {TLSMode: collections.ClientTLSSimple}},
					},
				},
			},
		},
		{
			name: "zone-aware setting",
			in: &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "r"), Spec: networking.DestinationRule{
				Host: "*.ns1.svc.cluster.local",
				TrafficPolicy: &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
					ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{
						Enabled:  wrapperspb.Bool(false),
						Failover: []*networking.ZoneAwareLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
					},
				}},
			}},
			want: &collections.DestinationRule{Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated, Host: "*.ns1.svc.cluster.local",
				Policy: &collections.TrafficPolicy{LoadBalancer: true, Locality: &collections.LocalitySetting{
					ZoneAware: true, Enabled: drTestBool(false), Failover: []collections.Failover{{From: "r1", To: "r2"}},
				}},
			},
		},
		{
			name: "a traffic policy with only fields krteds does not model is kept as a zero policy",
			in: &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "r"), Spec: networking.DestinationRule{
				Host: "reviews",
				TrafficPolicy: &networking.TrafficPolicy{ConnectionPool: &networking.ConnectionPoolSettings{
					Tcp: &networking.ConnectionPoolSettings_TCPSettings{MaxConnections: 10},
				}},
			}},
			want: &collections.DestinationRule{Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated, Host: "reviews",
				Policy: &collections.TrafficPolicy{}},
		},
		{
			name: "an empty workload selector is kept, not nil",
			in: &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "r"), Spec: networking.DestinationRule{
				Host:             "reviews",
				WorkloadSelector: &typev1beta1.WorkloadSelector{},
			}},
			want: &collections.DestinationRule{Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated, Host: "reviews",
				WorkloadSelector: map[string]string{}},
		},
		{
			name: "a workload selector is kept",
			in: &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "r"), Spec: networking.DestinationRule{
				Host:             "reviews",
				WorkloadSelector: &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}},
			}},
			want: &collections.DestinationRule{Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated, Host: "reviews",
				WorkloadSelector: map[string]string{"app": "a"}},
		},
	}
	invalid := []struct {
		name   string
		spec   func(*networking.DestinationRule)
		detail string
	}{
		{"empty host", func(s *networking.DestinationRule) { s.Host = "" }, "empty domain name"},
		{"bad host label", func(s *networking.DestinationRule) { s.Host = "foo..bar" }, `label "" invalid`},
		{"numeric top-level domain", func(s *networking.DestinationRule) { s.Host = "foo.123" }, "all-numeric"},
		{"partial wildcard in a later label", func(s *networking.DestinationRule) { s.Host = "foo.*.com" }, `label "*" invalid`},
		{"subset without name", func(s *networking.DestinationRule) { s.Subsets = []*networking.Subset{{}} }, "subset name cannot be empty"},
		{"subset name not a DNS label", func(s *networking.DestinationRule) { s.Subsets = []*networking.Subset{{Name: "v1_2"}} }, "subset name is invalid"},
		{"null subset", func(s *networking.DestinationRule) { s.Subsets = []*networking.Subset{nil} }, "subset may not be null"},
		{"duplicate subset names", func(s *networking.DestinationRule) {
			s.Subsets = []*networking.Subset{{Name: "v1"}, {Name: "v1"}}
		}, "duplicate subset names: v1"},
		{"invalid subset label key", func(s *networking.DestinationRule) {
			s.Subsets = []*networking.Subset{{Name: "v1", Labels: map[string]string{"a b": "x"}}}
		}, `invalid tag key: "a b"`},
		{"invalid subset label value", func(s *networking.DestinationRule) {
			s.Subsets = []*networking.Subset{{Name: "v1", Labels: map[string]string{"version": "-v1"}}}
		}, `invalid tag value: "-v1"`},
		{"empty traffic policy", func(s *networking.DestinationRule) { s.TrafficPolicy = &networking.TrafficPolicy{} }, "at least one field"},
		{"empty subset traffic policy", func(s *networking.DestinationRule) {
			s.Subsets = []*networking.Subset{{Name: "v1", TrafficPolicy: &networking.TrafficPolicy{}}}
		}, "traffic policy must have at least one field"},
		{"min health percent over 100", func(s *networking.DestinationRule) {
			s.TrafficPolicy = &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{MinHealthPercent: 101}}
		}, "percentage 101 is not in range 0..100"},
		{"outlier interval under 1ms", func(s *networking.DestinationRule) {
			s.TrafficPolicy = &networking.TrafficPolicy{OutlierDetection: &networking.OutlierDetection{Interval: durationpb.New(time.Microsecond)}}
		}, "duration must be greater than 1ms"},
		{"port-level setting without port", func(s *networking.DestinationRule) {
			s.TrafficPolicy = &networking.TrafficPolicy{PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
				{Tls: &networking.ClientTLSSettings{}},
			}}
		}, "portTrafficPolicy must have valid port"},
		{"empty port-level setting", func(s *networking.DestinationRule) {
			s.TrafficPolicy = &networking.TrafficPolicy{PortLevelSettings: []*networking.TrafficPolicy_PortTrafficPolicy{
				{Port: &networking.PortSelector{Number: 80}},
			}}
		}, "port traffic policy must have at least one field"},
		{"distribute and failover", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "r1", To: map[string]uint32{"r1": 100}}},
				Failover:   []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
			})
		}, "can not simultaneously specify 'distribute' and 'failover'"},
		{"failover and a region failoverPriority", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Failover:         []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2"}},
				FailoverPriority: []string{"topology.istio.io/network", "topology.kubernetes.io/region"},
			})
		}, "can not simultaneously set 'failover' and topology label 'topology.kubernetes.io/region'"},
		{"weights not summing to 100", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "r1", To: map[string]uint32{"r1": 60, "r2": 30}}},
			})
		}, "total locality weight 90 != 100"},
		{"weight 0", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "r1", To: map[string]uint32{"r1": 100, "r2": 0}}},
			})
		}, "locality weight must be in range [1, 100]"},
		// (Overlapping distribute targets are checked by istiod in map order, so whether a rule is
		// rejected depends on the run; krteds uses istiod's validation as it is.)
		{"overlapping distribute sources", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{
					{From: "r1", To: map[string]uint32{"r1": 100}},
					{From: "r1/z1", To: map[string]uint32{"r1": 100}},
				},
			})
		}, "locality r1/z1 overlap with previous specified ones"},
		{"wildcard not at the end", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "*/z1", To: map[string]uint32{"r1": 100}}},
			})
		}, "wildcard '*' number can not exceed 1 and must be in the end"},
		{"empty locality segment", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Distribute: []*networking.LocalityLoadBalancerSetting_Distribute{{From: "r1//s1", To: map[string]uint32{"r1": 100}}},
			})
		}, "must not contain empty region/zone/subzone info"},
		{"failover to the same region", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r1"}},
			})
		}, "must specify different regions"},
		{"failover to a zone", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "r2/z1"}},
			})
		}, "locality lb failover only specify region"},
		{"failover wildcard", func(s *networking.DestinationRule) {
			s.TrafficPolicy = drTestLocality(&networking.LocalityLoadBalancerSetting{
				Failover: []*networking.LocalityLoadBalancerSetting_Failover{{From: "r1", To: "*"}},
			})
		}, "should not contain '*' wildcard"},
		{"locality and zone-aware settings together", func(s *networking.DestinationRule) {
			s.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
				LocalityLbSetting:  &networking.LocalityLoadBalancerSetting{},
				ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{},
			}}
		}, "only one of localityLbSetting and zoneAwareLbSetting can be set"},
		{"zone-aware failoverPriority on zones", func(s *networking.DestinationRule) {
			s.TrafficPolicy = &networking.TrafficPolicy{LoadBalancer: &networking.LoadBalancerSettings{
				ZoneAwareLbSetting: &networking.ZoneAwareLoadBalancerSetting{FailoverPriority: []string{"topology.kubernetes.io/zone"}},
			}}
		}, "'failover_priority' for zone aware lb must not use topology label 'topology.kubernetes.io/zone'"},
		{"exportTo nowhere", func(s *networking.DestinationRule) { s.ExportTo = []string{"~"} }, "exportTo ~ (none) is not allowed"},
		{"exportTo own namespace and .", func(s *networking.DestinationRule) { s.ExportTo = []string{"ns1", "."} }, "duplicate entries in exportTo: . and current namespace ns1"},
		{"exportTo duplicate", func(s *networking.DestinationRule) { s.ExportTo = []string{"ns2", "ns2"} }, "duplicate entries in exportTo for entry ns2"},
		{"exportTo * and others", func(s *networking.DestinationRule) { s.ExportTo = []string{"*", "ns2"} }, "cannot have both public (*) and non-public"},
		{"exportTo invalid namespace", func(s *networking.DestinationRule) { s.ExportTo = []string{"ns_2"} }, "only .,*, or a valid DNS 1123 label"},
		{"workload selector exported elsewhere", func(s *networking.DestinationRule) {
			s.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a"}}
			s.ExportTo = []string{"ns2"}
		}, "cannot have exportTo beyond current namespace"},
		{"workload selector with a wildcard", func(s *networking.DestinationRule) {
			s.WorkloadSelector = &typev1beta1.WorkloadSelector{MatchLabels: map[string]string{"app": "a*"}}
		}, "wildcard is not supported in selector"},
	}
	for _, c := range invalid {
		in := &networkingclient.DestinationRule{ObjectMeta: transformtest.RuleMeta("ns1", "bad"), Spec: networking.DestinationRule{Host: "reviews"}}
		c.spec(&in.Spec)
		cases = append(cases, struct {
			name    string
			in      *networkingclient.DestinationRule
			want    *collections.DestinationRule
			reasons []string
			detail  string
		}{name: "invalid: " + c.name, in: in, reasons: []string{collections.ReasonInvalidDestinationRule}, detail: c.detail})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			probs, got := ConvertDestinationRule(c.in)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("ConvertDestinationRule (-want +got):\n%s", diff)
			}
			var reasons []string
			for _, p := range transformtest.ProblemsOf(probs) {
				reasons = append(reasons, p.Reason)
				if p.Kind != KindDestinationRule || p.Object != c.in.Namespace+"/"+c.in.Name {
					t.Errorf("problem %v: wrong kind or object", p)
				}
				if !strings.Contains(p.Detail, c.detail) {
					t.Errorf("problem detail %q does not contain %q", p.Detail, c.detail)
				}
			}
			if diff := cmp.Diff(c.reasons, reasons); diff != "" {
				t.Errorf("reported reasons (-want +got):\n%s", diff)
			}
		})
	}
}

func drTestLocality(l *networking.LocalityLoadBalancerSetting) *networking.TrafficPolicy {
	return &networking.TrafficPolicy{
		OutlierDetection: &networking.OutlierDetection{},
		LoadBalancer:     &networking.LoadBalancerSettings{LocalityLbSetting: l},
	}
}

// drTestRule builds a rule whose subsets carry only names.
func drTestRule(ns, name string, createdSec int, host string, exportTo []string, subsets ...string) collections.DestinationRule {
	r := collections.DestinationRule{Name: name, Namespace: ns, CreationTime: transformtest.RuleCreated.Add(time.Duration(createdSec) * time.Second),
		Host: host, ExportTo: exportTo}
	for _, s := range subsets {
		r.Subsets = append(r.Subsets, collections.Subset{Name: s})
	}
	return r
}

func drTestService(ns, hostname string) *collections.ServiceInfo {
	name, _, _ := strings.Cut(hostname, ".")
	return &collections.ServiceInfo{Name: name, Namespace: ns, Hostname: hostname}
}

func drTestSubsets(dr *collections.DestinationRule) []string {
	if dr == nil {
		return nil
	}
	out := []string{}
	for _, s := range dr.Subsets {
		out = append(out, s.Name)
	}
	return out
}

// TestResolveDestinationRuleIstioExportTo replays istiod's TestSetDestinationRuleWithExportTo
// (pilot/pkg/model/push_context_test.go).
func TestResolveDestinationRuleIstioExportTo(t *testing.T) {
	const testhost, appHost = "httpbin.org", "foo.app.org"
	drs := []collections.DestinationRule{
		drTestRule("test1", "rule1", 0, testhost, []string{".", "ns1"}, "subset1", "subset2"),
		drTestRule("test2", "rule2", 0, testhost, []string{"newNS", "ns1", "test1", "test2"}, "subset3", "subset4"),
		drTestRule("test3", "rule3", 0, testhost, []string{"*", "test1", "test2"}, "subset5", "subset6"),
		drTestRule("test4", "rule4-local", 0, testhost, []string{"test4"}, "subset15", "subset16"),
		drTestRule("istio-system", "rule4", 0, testhost, nil, "subset7", "subset8"),
		drTestRule("istio-system", "rule1", 0, testhost, []string{"."}, "subset9", "subset10"),
		drTestRule("istio-system", "rule2", 0, "*.org", []string{"."}, "subset11", "subset12"),
		drTestRule("istio-system", "rule3", 0, "*.app.org", []string{"."}, "subset13", "subset14"),
		drTestRule("test5", "rule5", 0, "api.test.com", []string{"istio-system"}, "subset5-0", "subset5-1"),
		drTestRule("test6", "rule6", 0, "api.test.com", []string{"istio-system"}, "subset6-0", "subset6-1"),
	}
	cases := []struct {
		proxyNs, serviceNs, host string
		want                     []string
	}{
		{"test1", "test1", testhost, []string{"subset1", "subset2"}},
		{"test1", "test2", testhost, []string{"subset1", "subset2"}},
		{"test2", "test1", testhost, []string{"subset3", "subset4"}},
		{"newNS", "test2", testhost, []string{"subset3", "subset4"}},
		{"test3", "test1", testhost, []string{"subset5", "subset6"}},
		{"test5", "test4", testhost, []string{"subset7", "subset8"}},
		{"ns1", "test1", testhost, []string{"subset1", "subset2"}},
		{"ns1", "random", testhost, []string{"subset7", "subset8"}},
		{"random", "random", testhost, []string{"subset7", "subset8"}},
		{"test3", "random", testhost, []string{"subset5", "subset6"}},
		{"istio-system", "random", testhost, []string{"subset9", "subset10"}},
		{"istio-system", "istio-system", testhost, []string{"subset9", "subset10"}},
		{"istio-system", "istio-system", appHost, []string{"subset13", "subset14"}},
		{"istio-system", "test5", "api.test.com", []string{"subset5-0", "subset5-1"}},
		{"istio-system", "test6", "api.test.com", []string{"subset6-0", "subset6-1"}},
		{"istio-system", "test7", "api.test.com", nil},
	}
	for _, c := range cases {
		t.Run(c.proxyNs+"-"+c.serviceNs+"-"+c.host, func(t *testing.T) {
			got := ResolveDestinationRule(drs, RuleProxy{Namespace: c.proxyNs}, drTestService(c.serviceNs, c.host), "istio-system")
			if diff := cmp.Diff(c.want, drTestSubsets(got)); diff != "" {
				t.Errorf("subsets (-want +got):\n%s", diff)
			}
		})
	}
}

func TestResolveDestinationRule(t *testing.T) {
	const root = "istio-system"
	reviews := drTestService("ns1", "reviews.ns1.svc.cluster.local")
	p1 := &collections.TrafficPolicy{OutlierDetection: true}
	p2 := &collections.TrafficPolicy{TLSMode: collections.ClientTLSDisable}
	withPolicy := func(r collections.DestinationRule, p *collections.TrafficPolicy) collections.DestinationRule {
		r.Policy = p
		return r
	}
	cases := []struct {
		name    string
		drs     []collections.DestinationRule
		proxyNs string
		svc     *collections.ServiceInfo
		// want is "<namespace>/<name>" of the chosen rule, "" for none.
		want        string
		wantSubsets []string
		wantHost    string
		wantPolicy  *collections.TrafficPolicy
	}{
		{name: "no rules", proxyNs: "ns2", svc: reviews},
		{
			name:    "service namespace rule, short host",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", nil, "v1")},
			proxyNs: "ns2", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"v1"}, wantHost: "reviews.ns1.svc.cluster.local",
		},
		{
			name:    "a short host is relative to the rule's namespace",
			drs:     []collections.DestinationRule{drTestRule("ns2", "a", 0, "reviews", nil, "v1")},
			proxyNs: "ns2", svc: reviews,
		},
		{
			name:    "short host in another cluster domain",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", nil)},
			proxyNs: "ns1", svc: drTestService("ns1", "reviews.ns1.svc.corp.example"),
			want: "ns1/a", wantSubsets: []string{}, wantHost: "reviews.ns1.svc.corp.example",
		},
		{
			name: "the proxy's namespace wins over the service's, even with a wildcard",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "exact", 0, "reviews.ns1.svc.cluster.local", nil, "svcns"),
				drTestRule("ns2", "wild", 0, "*.svc.cluster.local", nil, "proxyns"),
			},
			proxyNs: "ns2", svc: reviews,
			want: "ns2/wild", wantSubsets: []string{"proxyns"}, wantHost: "*.svc.cluster.local",
		},
		{
			name: "the service's namespace wins over the root namespace",
			drs: []collections.DestinationRule{
				drTestRule(root, "mesh", 0, "*", nil, "root"),
				drTestRule("ns1", "a", 0, "reviews", nil, "svcns"),
			},
			proxyNs: "ns3", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"svcns"},
		},
		{
			name: "root namespace fallback",
			drs: []collections.DestinationRule{
				drTestRule(root, "mesh", 0, "*.cluster.local", nil, "root"),
				drTestRule("ns1", "private", 0, "reviews", []string{"."}, "svcns"),
			},
			proxyNs: "ns3", svc: reviews,
			want: root + "/mesh", wantSubsets: []string{"root"}, wantHost: "*.cluster.local",
		},
		{
			name: "exact host beats wildcards, then the longest wildcard",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "star", 0, "*", nil, "star"),
				drTestRule("ns1", "svc", 0, "*.svc.cluster.local", nil, "svc"),
				drTestRule("ns1", "ns", 0, "*.ns1.svc.cluster.local", nil, "ns"),
				drTestRule("ns1", "exact", 0, "reviews.ns1.svc.cluster.local", nil, "exact"),
			},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/exact", wantSubsets: []string{"exact"},
		},
		{
			name: "most specific wildcard",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "star", 0, "*", nil, "star"),
				drTestRule("ns1", "ns", 0, "*.ns1.svc.cluster.local", nil, "ns"),
				drTestRule("ns1", "svc", 0, "*.svc.cluster.local", nil, "svc"),
			},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/ns", wantSubsets: []string{"ns"},
		},
		{
			name:    "exportTo . hides the rule from other namespaces",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", []string{"."}, "v1")},
			proxyNs: "ns2", svc: reviews,
		},
		{
			name:    "exportTo . applies in its own namespace",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", []string{"."}, "v1")},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"v1"},
		},
		{
			name:    "exportTo a namespace list",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", []string{"ns2"}, "v1")},
			proxyNs: "ns2", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"v1"},
		},
		{
			name:    "exportTo a list without the proxy's namespace",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", []string{"ns2"}, "v1")},
			proxyNs: "ns3", svc: reviews,
		},
		{
			name:    "exportTo a list without the rule's own namespace hides it there",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", []string{"ns2"}, "v1")},
			proxyNs: "ns1", svc: reviews,
		},
		{
			name:    "exportTo ~ is nowhere",
			drs:     []collections.DestinationRule{drTestRule("ns1", "a", 0, "reviews", []string{"~"}, "v1")},
			proxyNs: "ns1", svc: reviews,
		},
		{
			// istiod picks the most specific host of the pool first and only then checks exportTo,
			// so a hidden exact rule shadows a visible wildcard of the same namespace.
			name: "a hidden exact rule shadows a visible wildcard in the same namespace",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "exact", 0, "reviews", []string{"ns9"}, "exact"),
				drTestRule("ns1", "wild", 0, "*.ns1.svc.cluster.local", nil, "wild"),
				drTestRule(root, "mesh", 0, "*", nil, "root"),
			},
			proxyNs: "ns2", svc: reviews,
			want: root + "/mesh", wantSubsets: []string{"root"},
		},
		{
			name: "a private root rule applies to root proxies before the service's namespace",
			drs: []collections.DestinationRule{
				drTestRule(root, "private", 0, "*", []string{"."}, "rootprivate"),
				drTestRule("ns1", "a", 0, "reviews", nil, "svcns"),
			},
			proxyNs: root, svc: reviews,
			want: root + "/private", wantSubsets: []string{"rootprivate"},
		},
		{
			name: "a public root rule comes after the service's namespace for root proxies",
			drs: []collections.DestinationRule{
				drTestRule(root, "public", 0, "*", nil, "rootpublic"),
				drTestRule("ns1", "a", 0, "reviews", nil, "svcns"),
			},
			proxyNs: root, svc: reviews,
			want: "ns1/a", wantSubsets: []string{"svcns"},
		},
		{
			name: "a rule with a workload selector is not applied to a proxy it does not select",
			drs: []collections.DestinationRule{
				func() collections.DestinationRule {
					r := drTestRule("ns1", "selected", 0, "reviews", nil, "sel")
					r.WorkloadSelector = map[string]string{"app": "x"}
					return r
				}(),
				drTestRule("ns1", "plain", 1, "reviews", nil, "plain"),
			},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/plain", wantSubsets: []string{"plain"},
		},
		{
			name: "merge: the oldest policy wins, new subsets are appended",
			drs: []collections.DestinationRule{
				withPolicy(drTestRule("ns1", "b-newer", 10, "reviews", nil, "v1", "v3"), p2),
				withPolicy(drTestRule("ns1", "a-older", 5, "reviews.ns1.svc.cluster.local", nil, "v1", "v2"), p1),
			},
			proxyNs: "ns2", svc: reviews,
			want: "ns1/a-older", wantSubsets: []string{"v1", "v2", "v3"}, wantPolicy: p1,
		},
		{
			name: "merge: a later policy fills a missing one",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", nil, "v1"),
				withPolicy(drTestRule("ns1", "b", 1, "reviews", nil, "v2"), p2),
			},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"v1", "v2"}, wantPolicy: p2,
		},
		{
			name: "merge: equal creation times order by name",
			drs: []collections.DestinationRule{
				withPolicy(drTestRule("ns1", "b", 0, "reviews", nil, "vb"), p2),
				withPolicy(drTestRule("ns1", "a", 0, "reviews", nil, "va"), p1),
			},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"va", "vb"}, wantPolicy: p1,
		},
		{
			name: "merge: rules of different hosts do not merge",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", nil, "exact"),
				drTestRule("ns1", "b", 0, "*.ns1.svc.cluster.local", nil, "wild"),
			},
			proxyNs: "ns1", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"exact"},
		},
		{
			// Different exportTo: kept apart; both visible, the later entry is used.
			name: "merge: different exportTo stay separate and the later visible one wins",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", nil, "va"),
				drTestRule("ns1", "b", 1, "reviews", []string{"ns2"}, "vb"),
			},
			proxyNs: "ns2", svc: reviews,
			want: "ns1/b", wantSubsets: []string{"vb"},
		},
		{
			name: "merge: different exportTo, only the visible one",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", nil, "va"),
				drTestRule("ns1", "b", 1, "reviews", []string{"ns2"}, "vb"),
			},
			proxyNs: "ns3", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"va"},
		},
		{
			// istiod merges a rule into an earlier entry whose exportTo is a non-empty subset of its
			// own, and then does not keep it as an entry of its own.
			name: "merge: a superset exportTo merges into the earlier entry",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", []string{"ns2"}, "va"),
				drTestRule("ns1", "b", 1, "reviews", []string{"ns2", "ns3"}, "vb"),
			},
			proxyNs: "ns2", svc: reviews,
			want: "ns1/a", wantSubsets: []string{"va", "vb"},
		},
		{
			// c merges into a's entry, and since b's entry (the last) does not take it, it also
			// stands alone after b; that last visible entry is used.
			name: "merge: a rule merged into an earlier entry can also stand alone",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", nil, "va"),
				drTestRule("ns1", "b", 1, "reviews", []string{"ns2"}, "vb"),
				drTestRule("ns1", "c", 2, "reviews", nil, "vc"),
			},
			proxyNs: "ns3", svc: reviews,
			want: "ns1/c", wantSubsets: []string{"vc"},
		},
		{
			name: "merge: a superset exportTo merged away is invisible to its extra namespaces",
			drs: []collections.DestinationRule{
				drTestRule("ns1", "a", 0, "reviews", []string{"ns2"}, "va"),
				drTestRule("ns1", "b", 1, "reviews", []string{"ns2", "ns3"}, "vb"),
			},
			proxyNs: "ns3", svc: reviews,
		},
		{
			// TestSetDestinationRuleMerging: rule3 exported to istio-system only stays apart.
			name: "merge: istiod's rule1+rule2 with rule3 apart, seen from another namespace",
			drs: []collections.DestinationRule{
				drTestRule("test", "rule1", 0, "httpbin.org", nil, "subset1", "subset2"),
				drTestRule("test", "rule2", 0, "httpbin.org", nil, "subset3", "subset4"),
				drTestRule("test", "rule3", 0, "httpbin.org", []string{root}, "subset5", "subset6"),
			},
			proxyNs: "other", svc: drTestService("test", "httpbin.org"),
			want: "test/rule1", wantSubsets: []string{"subset1", "subset2", "subset3", "subset4"},
		},
		{
			name: "merge: istiod's rule1+rule2 with rule3 apart, seen from the root namespace",
			drs: []collections.DestinationRule{
				drTestRule("test", "rule1", 0, "httpbin.org", nil, "subset1", "subset2"),
				drTestRule("test", "rule2", 0, "httpbin.org", nil, "subset3", "subset4"),
				drTestRule("test", "rule3", 0, "httpbin.org", []string{root}, "subset5", "subset6"),
			},
			proxyNs: root, svc: drTestService("test", "httpbin.org"),
			want: "test/rule3", wantSubsets: []string{"subset5", "subset6"},
		},
		{
			name: "merge: istiod's rule1+rule2 in their own namespace",
			drs: []collections.DestinationRule{
				drTestRule("test", "rule1", 0, "httpbin.org", nil, "subset1", "subset2"),
				drTestRule("test", "rule2", 0, "httpbin.org", nil, "subset3", "subset4"),
				drTestRule("test", "rule3", 0, "httpbin.org", []string{root}, "subset5", "subset6"),
			},
			proxyNs: "test", svc: drTestService("test", "httpbin.org"),
			want: "test/rule1", wantSubsets: []string{"subset1", "subset2", "subset3", "subset4"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append([]collections.DestinationRule(nil), c.drs...)
			got := ResolveDestinationRule(c.drs, RuleProxy{Namespace: c.proxyNs}, c.svc, root)
			if c.want == "" {
				if got != nil {
					t.Fatalf("got %s, want none", got.ResourceName())
				}
				return
			}
			if got == nil {
				t.Fatalf("got none, want %s", c.want)
			}
			if got.ResourceName() != c.want {
				t.Errorf("got %s, want %s", got.ResourceName(), c.want)
			}
			if diff := cmp.Diff(c.wantSubsets, drTestSubsets(got)); diff != "" {
				t.Errorf("subsets (-want +got):\n%s", diff)
			}
			if c.wantHost != "" && got.Host != c.wantHost {
				t.Errorf("host %q, want %q", got.Host, c.wantHost)
			}
			if c.wantPolicy != nil && got.Policy != c.wantPolicy {
				t.Errorf("policy %+v, want %+v", got.Policy, c.wantPolicy)
			}
			// The input is never modified.
			if diff := cmp.Diff(in, c.drs); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

// TestResolveDestinationRuleWorkloadSelector: rules with a workloadSelector, as istiod's
// setDestinationRules, mergeDestinationRule and SidecarScope.DestinationRule treat them (the
// first cases replay istiod's TestSetDestinationRuleWithWorkloadSelector, with subsets to show
// what each entry merged).
func TestResolveDestinationRuleWorkloadSelector(t *testing.T) {
	const root = "istio-system"
	httpbin := drTestService("test", "httpbin.org")
	reviews := drTestService("ns2", "reviews.ns2.svc.cluster.local")
	sel := func(r collections.DestinationRule, labels map[string]string) collections.DestinationRule {
		r.WorkloadSelector = labels
		return r
	}
	p1 := &collections.TrafficPolicy{OutlierDetection: true}
	p2 := &collections.TrafficPolicy{TLSMode: collections.ClientTLSDisable}
	withPolicy := func(r collections.DestinationRule, p *collections.TrafficPolicy) collections.DestinationRule {
		r.Policy = p
		return r
	}
	istiod := []collections.DestinationRule{
		withPolicy(sel(drTestRule("test", "nsRule1", 0, "httpbin.org", []string{"test2", "."}, "s1"), map[string]string{"app": "app1"}), p1),
		withPolicy(sel(drTestRule("test", "nsRule2", 1, "httpbin.org", []string{"test2", "."}, "s2"), map[string]string{"app": "app2"}), p2),
		withPolicy(sel(drTestRule("test", "nsRule3", 1, "httpbin.org", []string{"test2", "."}, "s3"), map[string]string{"app": "app2"}), p1),
		withPolicy(drTestRule("test", "nsRule4", -1, "httpbin.org", []string{".", "test2"}, "s4"), p1),
	}
	cases := []struct {
		name     string
		drs      []collections.DestinationRule
		proxy    RuleProxy
		svc      *collections.ServiceInfo
		want     string
		subsets  []string
		policy   *collections.TrafficPolicy
		variants []string
	}{
		{
			name: "istiod: a proxy app1 selects gets app1's entry, the catch-all's subsets merged in",
			drs:  istiod, proxy: RuleProxy{Namespace: "test", Selected: []string{"nsRule1"}}, svc: httpbin,
			want: "test/nsRule1", subsets: []string{"s1", "s4"}, policy: p1, variants: []string{"nsRule1", "nsRule2"},
		},
		{
			name: "istiod: rules with the same selector merge, the oldest policy wins",
			drs:  istiod, proxy: RuleProxy{Namespace: "test", Selected: []string{"nsRule2", "nsRule3"}}, svc: httpbin,
			want: "test/nsRule2", subsets: []string{"s2", "s3", "s4"}, policy: p2, variants: []string{"nsRule1", "nsRule2"},
		},
		{
			name: "istiod: a proxy no selector selects gets the catch-all",
			drs:  istiod, proxy: RuleProxy{Namespace: "test"}, svc: httpbin,
			want: "test/nsRule4", subsets: []string{"s4"}, variants: []string{"nsRule1", "nsRule2"},
		},
		{
			name: "istiod: a rule with a selector is never exported",
			drs:  istiod, proxy: RuleProxy{Namespace: "test2", Selected: []string{"nsRule1"}}, svc: httpbin,
			want: "test/nsRule4", subsets: []string{"s4"},
		},
		{
			name: "the first selecting rule in istiod's order wins",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "b", 0, "reviews.ns2.svc.cluster.local", nil, "b"), map[string]string{"app": "x"}),
				sel(drTestRule("ns1", "a", 5, "reviews.ns2.svc.cluster.local", nil, "a"), map[string]string{"tier": "y"}),
			},
			proxy: RuleProxy{Namespace: "ns1", Selected: []string{"b", "a"}}, svc: reviews,
			want: "ns1/b", subsets: []string{"b"}, variants: []string{"b", "a"},
		},
		{
			name: "a namespace with only selector rules for the host gives its other proxies none",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "sel", 0, "reviews.ns2.svc.cluster.local", nil, "sel"), map[string]string{"app": "x"}),
				drTestRule("ns2", "public", 0, "reviews", nil, "public"),
			},
			proxy: RuleProxy{Namespace: "ns1"}, svc: reviews, variants: []string{"sel"},
		},
		{
			name: "the same rules: a proxy of another namespace gets the service's",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "sel", 0, "reviews.ns2.svc.cluster.local", nil, "sel"), map[string]string{"app": "x"}),
				drTestRule("ns2", "public", 0, "reviews", nil, "public"),
			},
			proxy: RuleProxy{Namespace: "ns3"}, svc: reviews, want: "ns2/public", subsets: []string{"public"},
		},
		{
			name: "a selector rule of another namespace selects no proxy",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns2", "sel", 0, "reviews", nil, "sel"), map[string]string{}),
				drTestRule("ns2", "public", 0, "reviews", nil, "public"),
			},
			proxy: RuleProxy{Namespace: "ns1", Selected: []string{"sel"}}, svc: reviews, want: "ns2/public", subsets: []string{"public"},
		},
		{
			name: "a catch-all exported to its namespace alone folds into the selector entry and has none of its own",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "sel", 5, "reviews.ns2.svc.cluster.local", nil, "sel"), map[string]string{"app": "x"}),
				drTestRule("ns1", "private", 0, "reviews.ns2.svc.cluster.local", []string{"."}, "private"),
			},
			proxy: RuleProxy{Namespace: "ns1"}, svc: reviews, variants: []string{"sel"},
		},
		{
			name: "the same: the selected proxy gets both rules' subsets",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "sel", 5, "reviews.ns2.svc.cluster.local", nil, "sel"), map[string]string{"app": "x"}),
				drTestRule("ns1", "private", 0, "reviews.ns2.svc.cluster.local", []string{"."}, "private"),
			},
			proxy: RuleProxy{Namespace: "ns1", Selected: []string{"sel"}}, svc: reviews, want: "ns1/sel", subsets: []string{"sel", "private"},
			variants: []string{"sel"},
		},
		{
			name: "a catch-all without exportTo stays apart from the selector entry",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "sel", 5, "reviews.ns2.svc.cluster.local", nil, "sel"), map[string]string{"app": "x"}),
				drTestRule("ns1", "plain", 0, "reviews.ns2.svc.cluster.local", nil, "plain"),
			},
			proxy: RuleProxy{Namespace: "ns1", Selected: []string{"sel"}}, svc: reviews, want: "ns1/sel", subsets: []string{"sel"},
			variants: []string{"sel"},
		},
		{
			name: "an exact host without a selector is more specific than a wildcard with one",
			drs: []collections.DestinationRule{
				sel(drTestRule("ns1", "sel", 0, "*.ns2.svc.cluster.local", nil, "sel"), map[string]string{"app": "x"}),
				drTestRule("ns1", "exact", 0, "reviews.ns2.svc.cluster.local", nil, "exact"),
			},
			proxy: RuleProxy{Namespace: "ns1", Selected: []string{"sel"}}, svc: reviews, want: "ns1/exact", subsets: []string{"exact"},
		},
		{
			name: "a root namespace selector rule applies to the root namespace's proxies",
			drs: []collections.DestinationRule{
				sel(drTestRule(root, "sel", 0, "*.cluster.local", nil, "sel"), map[string]string{"app": "gw"}),
				drTestRule(root, "mesh", 0, "*.cluster.local", nil, "mesh"),
			},
			proxy: RuleProxy{Namespace: root, Selected: []string{"sel"}}, svc: reviews, want: root + "/sel", subsets: []string{"sel"},
			variants: []string{"sel"},
		},
		{
			name: "the same rules: proxies elsewhere get the mesh rule",
			drs: []collections.DestinationRule{
				sel(drTestRule(root, "sel", 0, "*.cluster.local", nil, "sel"), map[string]string{"app": "gw"}),
				drTestRule(root, "mesh", 0, "*.cluster.local", nil, "mesh"),
			},
			proxy: RuleProxy{Namespace: "ns1", Selected: []string{"sel"}}, svc: reviews, want: root + "/mesh", subsets: []string{"mesh"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := append([]collections.DestinationRule(nil), c.drs...)
			got := ResolveDestinationRule(c.drs, c.proxy, c.svc, root)
			name := ""
			if got != nil {
				name = got.ResourceName()
			}
			if name != c.want {
				t.Fatalf("got rule %q, want %q", name, c.want)
			}
			if diff := cmp.Diff(c.subsets, drTestSubsets(got)); got != nil && diff != "" {
				t.Errorf("subsets (-want +got):\n%s", diff)
			}
			if c.policy != nil && got.Policy != c.policy {
				t.Errorf("policy %+v, want %+v", got.Policy, c.policy)
			}
			var variants []string
			for _, r := range SelectorVariants(c.drs, c.proxy.Namespace, c.svc, root) {
				variants = append(variants, r.Name)
			}
			if diff := cmp.Diff(c.variants, variants); diff != "" {
				t.Errorf("selector variants of %s (-want +got):\n%s", c.proxy.Namespace, diff)
			}
			if diff := cmp.Diff(in, c.drs); diff != "" {
				t.Errorf("input modified (-before +after):\n%s", diff)
			}
		})
	}
}

func TestEffectiveTrafficPolicySubset(t *testing.T) {
	locX := &collections.LocalitySetting{Failover: []collections.Failover{{From: "r1", To: "r2"}}}
	locY := &collections.LocalitySetting{FailoverPriority: []string{"topology.istio.io/network"}}
	top := &collections.TrafficPolicy{OutlierDetection: true, MinHealthPercent: 50, LoadBalancer: true, Locality: locX,
		TLSMode: collections.ClientTLSIstioMutual}
	dr := &collections.DestinationRule{
		Name: "r", Namespace: "ns1", Host: "reviews",
		Policy:       top,
		PortPolicies: map[uint32]*collections.TrafficPolicy{8080: {TLSMode: collections.ClientTLSDisable}},
		Subsets: []collections.Subset{
			{Name: "plain", Labels: map[string]string{"version": "v1"}},
			{Name: "nolabels", Labels: map[string]string{}},
			{Name: "lb", Labels: map[string]string{"version": "v2"}, Policy: &collections.TrafficPolicy{LoadBalancer: true, Locality: locY}},
			{Name: "lbonly", Policy: &collections.TrafficPolicy{LoadBalancer: true}},
			{Name: "tls", Policy: &collections.TrafficPolicy{TLSMode: collections.ClientTLSSimple},
				PortPolicies: map[uint32]*collections.TrafficPolicy{9090: {OutlierDetection: true}}},
		},
	}
	noTop := &collections.DestinationRule{Subsets: []collections.Subset{{Name: "s", Policy: &collections.TrafficPolicy{TLSMode: collections.ClientTLSMutual}}}}
	cases := []struct {
		name       string
		dr         *collections.DestinationRule
		port       int32
		subset     string
		want       *collections.TrafficPolicy
		wantLabels map[string]string
		wantFound  bool
	}{
		{name: "no rule, no subset", dr: nil, port: 80, wantFound: true},
		{name: "no rule, a subset", dr: nil, port: 80, subset: "v1", wantFound: false},
		{name: "top-level", dr: dr, port: 80, want: top, wantFound: true},
		{name: "port-level replaces the whole top-level policy", dr: dr, port: 8080,
			want: &collections.TrafficPolicy{TLSMode: collections.ClientTLSDisable}, wantFound: true},
		{name: "subset without policy", dr: dr, port: 80, subset: "plain", want: top,
			wantLabels: map[string]string{"version": "v1"}, wantFound: true},
		{name: "subset with empty labels", dr: dr, port: 80, subset: "nolabels", want: top, wantFound: true},
		{name: "unknown subset", dr: dr, port: 80, subset: "v9", want: top, wantFound: false},
		{name: "subset overrides the fields it sets", dr: dr, port: 80, subset: "lb",
			want: &collections.TrafficPolicy{OutlierDetection: true, MinHealthPercent: 50, LoadBalancer: true, Locality: locY,
				TLSMode: collections.ClientTLSIstioMutual},
			wantLabels: map[string]string{"version": "v2"}, wantFound: true},
		{name: "a subset loadBalancer without locality drops the rule's locality", dr: dr, port: 80, subset: "lbonly",
			want: &collections.TrafficPolicy{OutlierDetection: true, MinHealthPercent: 50, LoadBalancer: true,
				TLSMode: collections.ClientTLSIstioMutual},
			wantFound: true},
		{name: "subset over the rule's port-level policy", dr: dr, port: 8080, subset: "tls",
			want: &collections.TrafficPolicy{TLSMode: collections.ClientTLSSimple}, wantFound: true},
		{name: "subset port-level policy overrides every field", dr: dr, port: 9090, subset: "tls",
			want: &collections.TrafficPolicy{OutlierDetection: true}, wantFound: true},
		{name: "subset policy without a rule policy", dr: noTop, port: 80, subset: "s",
			want: &collections.TrafficPolicy{TLSMode: collections.ClientTLSMutual}, wantFound: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, labels, found := EffectiveTrafficPolicy(c.dr, c.port, c.subset)
			if diff := cmp.Diff(c.want, got); diff != "" {
				t.Errorf("policy (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(c.wantLabels, labels); diff != "" {
				t.Errorf("labels (-want +got):\n%s", diff)
			}
			if found != c.wantFound {
				t.Errorf("found %v, want %v", found, c.wantFound)
			}
		})
	}
	if top.TLSMode != collections.ClientTLSIstioMutual || top.Locality != locX {
		t.Errorf("the rule's policy was modified: %+v", top)
	}
}

func TestDestinationRuleEquals(t *testing.T) {
	base := func() collections.DestinationRule {
		return collections.DestinationRule{
			Name: "r", Namespace: "ns1", CreationTime: transformtest.RuleCreated, Host: "reviews", ExportTo: []string{"."},
			Policy: &collections.TrafficPolicy{LoadBalancer: true, Locality: &collections.LocalitySetting{
				Enabled:    drTestBool(true),
				Distribute: []collections.Distribute{{From: "r1", To: map[string]uint32{"r1": 100}}},
			}},
			PortPolicies: map[uint32]*collections.TrafficPolicy{80: {TLSMode: collections.ClientTLSDisable}},
			Subsets:      []collections.Subset{{Name: "v1", Labels: map[string]string{"v": "1"}}},
		}
	}
	changes := map[string]func(*collections.DestinationRule){
		"creation time":     func(d *collections.DestinationRule) { d.CreationTime = d.CreationTime.Add(time.Second) },
		"exportTo":          func(d *collections.DestinationRule) { d.ExportTo = []string{"*"} },
		"selector nil→{}":   func(d *collections.DestinationRule) { d.WorkloadSelector = map[string]string{} },
		"enabled value":     func(d *collections.DestinationRule) { d.Policy.Locality.Enabled = drTestBool(false) },
		"enabled unset":     func(d *collections.DestinationRule) { d.Policy.Locality.Enabled = nil },
		"distribute weight": func(d *collections.DestinationRule) { d.Policy.Locality.Distribute[0].To["r1"] = 99 },
		"port policy":       func(d *collections.DestinationRule) { d.PortPolicies[80] = &collections.TrafficPolicy{} },
		"port policy gone":  func(d *collections.DestinationRule) { d.PortPolicies = nil },
		"subset label":      func(d *collections.DestinationRule) { d.Subsets[0].Labels["v"] = "2" },
		"subset policy":     func(d *collections.DestinationRule) { d.Subsets[0].Policy = &collections.TrafficPolicy{} },
		"policy nil":        func(d *collections.DestinationRule) { d.Policy = nil },
	}
	a, b := base(), base()
	if !a.Equals(b) {
		t.Fatal("identical rules differ")
	}
	for name, change := range changes {
		t.Run(name, func(t *testing.T) {
			c := base()
			change(&c)
			if a.Equals(c) || c.Equals(a) {
				t.Errorf("rules equal after changing %s", name)
			}
		})
	}
}
