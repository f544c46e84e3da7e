package graphs_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/test/rigs"
)

// sep is one expected lb endpoint: address, port, weight, tlsMode ("" = no
// envoy.transport_socket_match), the istio.workload metadata and the health status (UNKNOWN, the
// zero value, for what istiod sets none on: inline endpoints and WorkloadEntries; HEALTHY for a
// Pod a workloadSelector selects, as istiod's pod cache builds its workload instance).
type sep struct {
	addr     string
	port     uint32
	weight   uint32
	tls      string
	workload string
	health   core.HealthStatus
}

type sloc struct {
	region, zone string
	eps          []sep
}

// seCLA writes a whole ClusterLoadAssignment as istiod's endpoint builder does: localities sorted
// by label, each weighted by the sum of its endpoints' weights, every endpoint with its health,
// weight, the istio workload metadata and, for a tlsMode other than disabled, the transport
// socket match.
func seCLA(name string, locs ...sloc) *endpoint.ClusterLoadAssignment {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: name}
	for _, l := range locs {
		g := &endpoint.LocalityLbEndpoints{Locality: &core.Locality{Region: l.region, Zone: l.zone}}
		var sum uint32
		for _, e := range l.eps {
			w := max(e.weight, 1)
			sum += w
			fm := map[string]*structpb.Struct{"istio": {Fields: map[string]*structpb.Value{"workload": structpb.NewStringValue(e.workload)}}}
			if e.tls != "" {
				fm["envoy.transport_socket_match"] = &structpb.Struct{Fields: map[string]*structpb.Value{"tlsMode": structpb.NewStringValue(e.tls)}}
			}
			g.LbEndpoints = append(g.LbEndpoints, &endpoint.LbEndpoint{
				HostIdentifier: &endpoint.LbEndpoint_Endpoint{Endpoint: &endpoint.Endpoint{Address: &core.Address{
					Address: &core.Address_SocketAddress{SocketAddress: &core.SocketAddress{Address: e.addr, PortSpecifier: &core.SocketAddress_PortValue{PortValue: e.port}}},
				}}},
				HealthStatus:        e.health,
				LoadBalancingWeight: wrapperspb.UInt32(w),
				Metadata:            &core.Metadata{FilterMetadata: fm},
			})
		}
		g.LoadBalancingWeight = wrapperspb.UInt32(sum)
		cla.Endpoints = append(cla.Endpoints, g)
	}
	return cla
}

const seNamespaces = `
apiVersion: v1
kind: Namespace
metadata: {name: istio-system, labels: {topology.istio.io/network: net1}}
---
apiVersion: v1
kind: Namespace
metadata: {name: ns1}
`

// dnsEntry is a DNS ServiceEntry without endpoints: Envoy resolves its host.
const dnsEntry = `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: dns, namespace: ns1}
spec:
  hosts: [dns.example.com]
  resolution: DNS
  ports: [{number: 443, name: tls, protocol: TLS}]
`

// TestServiceEntryAndWorkloadEntryCLAs holds the CLAs of ServiceEntry hosts and of Services that
// select WorkloadEntries to istiod's serviceentry registry (convertServices,
// convertServiceEntryToInstances, convertWorkloadEntryToWorkloadInstance,
// convertWorkloadInstanceToServiceInstance, isHealthy) and kube controller
// (serviceInstancesFromWorkloadInstances, serviceInstanceFromWorkloadInstance).
func TestServiceEntryAndWorkloadEntryCLAs(t *testing.T) {
	cases := []struct {
		name     string
		yaml     string
		clusters map[string]*endpoint.ClusterLoadAssignment
		// absent are cluster names that must have no CLA (DNS clusters carry theirs in CDS, a
		// port an entry's service does not take has none).
		absent []string
		// problems are substrings of the problems the objects must be reported with.
		problems []string
	}{{
		name: "STATIC entry: inline endpoints on each port, port map over number, locality, weight, identity",
		yaml: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: ext, namespace: ns1}
spec:
  hosts: [api.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports:
  - {number: 80, name: http, protocol: HTTP}
  - {number: 9090, name: grpc, protocol: GRPC, targetPort: 9091}
  endpoints:
  - address: 10.1.0.2
    ports: {http: 8080}
    labels: {app: api, version: v1}
    locality: r1/z1
    weight: 3
    serviceAccount: api-sa
  - address: 10.1.0.1
    network: net2
`,
		clusters: map[string]*endpoint.ClusterLoadAssignment{
			// Localities sorted by label: "" before "r1/z1". The workload is <entry>-<index>; the
			// canonical name falls back to it; a service account makes tlsMode istio.
			"outbound|80||api.example.com": seCLA("outbound|80||api.example.com",
				sloc{eps: []sep{{addr: "10.1.0.1", port: 80, workload: "ext-1;ns1;ext-1;;Kubernetes"}}},
				sloc{region: "r1", zone: "z1", eps: []sep{{addr: "10.1.0.2", port: 8080, weight: 3, tls: "istio", workload: "ext-0;ns1;api;v1;Kubernetes"}}}),
			// No port-map entry for grpc: the port's targetPort.
			"outbound|9090||api.example.com": seCLA("outbound|9090||api.example.com",
				sloc{eps: []sep{{addr: "10.1.0.1", port: 9091, workload: "ext-1;ns1;ext-1;;Kubernetes"}}},
				sloc{region: "r1", zone: "z1", eps: []sep{{addr: "10.1.0.2", port: 9091, weight: 3, tls: "istio", workload: "ext-0;ns1;api;v1;Kubernetes"}}}),
		},
	}, {
		name: "DNS entries get no EDS; a hostname under STATIC is reported and left out",
		yaml: dnsEntry + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: bad, namespace: ns1}
spec:
  hosts: [bad.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: db.example.com}, {address: 10.1.0.9}]
`,
		clusters: map[string]*endpoint.ClusterLoadAssignment{
			"outbound|80||bad.example.com": seCLA("outbound|80||bad.example.com",
				sloc{eps: []sep{{addr: "10.1.0.9", port: 80, workload: "bad-1;ns1;bad-1;;Kubernetes"}}}),
		},
		absent:   []string{"outbound|443||dns.example.com"},
		problems: []string{`address "db.example.com" is not an IP address`},
	}, {
		name: "workloadSelector: ready Pods (container port by name) and healthy WorkloadEntries of the namespace",
		yaml: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: vms, namespace: ns1}
spec:
  hosts: [vm.example.com]
  location: MESH_INTERNAL
  resolution: STATIC
  ports: [{number: 80, name: http, protocol: HTTP, targetPort: 8081}]
  workloadSelector: {labels: {app: vm}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-a, namespace: ns1, labels: {version: v2, service.istio.io/workload-name: vm-a-wl}}
spec:
  address: 10.2.0.1
  labels: {app: vm, version: v1}
  ports: {http: 9000}
  serviceAccount: vm-sa
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-b, namespace: ns1}
spec:
  address: 10.2.0.2
  labels: {app: vm, security.istio.io/tlsMode: disabled, service.istio.io/workload-name: from-spec}
  locality: r2/z2
  serviceAccount: vm-sa
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-sick, namespace: ns1, annotations: {proxy.istio.io/health-checks-enabled: "true"}}
spec: {address: 10.2.0.3, labels: {app: vm}}
status:
  conditions: [{type: Healthy, status: "False"}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-well, namespace: ns1, annotations: {proxy.istio.io/health-checks-enabled: "true", istio.io/autoRegistrationGroup: vm-group}}
spec: {address: 10.2.0.4, labels: {app: vm}}
status:
  conditions: [{type: Healthy, status: "True"}]
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: vm-elsewhere, namespace: ns2}
spec: {address: 10.2.0.5, labels: {app: vm}}
---
apiVersion: v1
kind: Pod
metadata: {name: vm-pod, namespace: ns1, labels: {app: vm}}
spec:
  containers: [{name: c, ports: [{name: http, containerPort: 8080}]}]
status:
  phase: Running
  podIP: 10.2.0.6
  conditions: [{type: Ready, status: "True"}]
---
apiVersion: v1
kind: Pod
metadata: {name: vm-pod-unready, namespace: ns1, labels: {app: vm}}
status:
  phase: Running
  podIP: 10.2.0.7
  conditions: [{type: Ready, status: "False"}]
`,
		clusters: map[string]*endpoint.ClusterLoadAssignment{
			// Metadata labels override spec labels (vm-a is v2). vm-b's own tlsMode label wins
			// over its service account. vm-sick is left out until its Healthy condition is True.
			// The workload name (labels.WorkloadNameFromWorkloadEntry): the auto-registration
			// group, else the metadata's workload-name label (vm-b's in its spec is not read).
			"outbound|80||vm.example.com": seCLA("outbound|80||vm.example.com",
				sloc{eps: []sep{
					{addr: "10.2.0.1", port: 9000, tls: "istio", workload: "vm-a-wl;ns1;vm;v2;Kubernetes"},
					{addr: "10.2.0.4", port: 8081, workload: "vm-group;ns1;vm;;Kubernetes"},
					{addr: "10.2.0.6", port: 8080, workload: "vm-pod;ns1;vm;;Kubernetes", health: core.HealthStatus_HEALTHY},
				}},
				sloc{region: "r2", zone: "z2", eps: []sep{{addr: "10.2.0.2", port: 8081, workload: "vm-b;ns1;vm;;Kubernetes"}}}),
		},
	}, {
		name: "a Service selects WorkloadEntries: numeric targetPort unless the entry maps the port name; a named targetPort must be mapped",
		yaml: `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns1}
spec:
  selector: {app: web}
  ports:
  - {name: http, port: 80, targetPort: 8080}
  - {name: admin, port: 81, targetPort: mgmt}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: web-vm-1, namespace: ns1}
spec: {address: 10.3.0.1, labels: {app: web}, ports: {http: 9090, mgmt: 9191}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: web-vm-2, namespace: ns1}
spec: {address: 10.3.0.2, labels: {app: web}}
---
apiVersion: networking.istio.io/v1
kind: WorkloadEntry
metadata: {name: other, namespace: ns1}
spec: {address: 10.3.0.3, labels: {app: other}}
`,
		clusters: map[string]*endpoint.ClusterLoadAssignment{
			"outbound|80||web.ns1.svc.cluster.local": seCLA("outbound|80||web.ns1.svc.cluster.local",
				sloc{eps: []sep{
					{addr: "10.3.0.1", port: 9090, workload: "web-vm-1;ns1;web;;Kubernetes"},
					{addr: "10.3.0.2", port: 8080, workload: "web-vm-2;ns1;web;;Kubernetes"},
				}}),
			"outbound|81||web.ns1.svc.cluster.local": seCLA("outbound|81||web.ns1.svc.cluster.local",
				sloc{eps: []sep{{addr: "10.3.0.1", port: 9191, workload: "web-vm-1;ns1;web;;Kubernetes"}}}),
		},
	}, {
		name: "entries of one namespace for one host are one service, their endpoints merged; never over a Kubernetes Service",
		yaml: `
apiVersion: v1
kind: Service
metadata: {name: web, namespace: ns1}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: first, namespace: ns1, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [shared.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}]
  endpoints: [{address: 10.4.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: second, namespace: ns1, creationTimestamp: "2026-02-01T00:00:00Z"}
spec:
  hosts: [shared.example.com, web.ns1.svc.cluster.local]
  resolution: STATIC
  ports: [{number: 80, name: http}]
  endpoints: [{address: 10.4.0.2}]
`,
		clusters: map[string]*endpoint.ClusterLoadAssignment{
			// istiod's mergeServicesInstancesByNamespaceHost.
			"outbound|80||shared.example.com": seCLA("outbound|80||shared.example.com",
				sloc{eps: []sep{{addr: "10.4.0.1", port: 80, workload: "first-0;ns1;first-0;;Kubernetes"}, {addr: "10.4.0.2", port: 80, workload: "second-0;ns1;second-0;;Kubernetes"}}}),
		},
		problems: []string{`host "web.ns1.svc.cluster.local": a Kubernetes Service hostname`},
	}, {
		// istiod: every entry's endpoints join the host's shard (mergeServicesInstancesByNamespaceHost),
		// each on its own ports; the sidecar scope adds a later entry's new port numbers only when
		// canMergeServices holds (same resolution, labels, workloadSelector, exportTo).
		name: "entries of one namespace: the later ones' endpoints always join, their new ports only with the same settings",
		yaml: `
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: first, namespace: ns1, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [merge.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}]
  endpoints: [{address: 10.5.0.1}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: labelled, namespace: ns1, creationTimestamp: "2026-02-01T00:00:00Z", labels: {team: x}}
spec:
  hosts: [merge.example.com]
  resolution: STATIC
  ports: [{number: 80, name: http}, {number: 8443, name: https}]
  endpoints: [{address: 10.5.0.2}]
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: third, namespace: ns1, creationTimestamp: "2026-03-01T00:00:00Z"}
spec:
  hosts: [merge.example.com]
  resolution: STATIC
  ports: [{number: 80, name: web}, {number: 9090, name: grpc, targetPort: 9091}]
  endpoints: [{address: 10.5.0.3}]
`,
		clusters: map[string]*endpoint.ClusterLoadAssignment{
			// third names port 80 "web": its endpoint is not on the port first named "http".
			"outbound|80||merge.example.com": seCLA("outbound|80||merge.example.com",
				sloc{eps: []sep{{addr: "10.5.0.1", port: 80, workload: "first-0;ns1;first-0;;Kubernetes"}, {addr: "10.5.0.2", port: 80, workload: "labelled-0;ns1;labelled-0;;Kubernetes"}}}),
			"outbound|9090||merge.example.com": seCLA("outbound|9090||merge.example.com",
				sloc{eps: []sep{{addr: "10.5.0.3", port: 9091, workload: "third-0;ns1;third-0;;Kubernetes"}}}),
		},
		absent:   []string{"outbound|8443||merge.example.com"},
		problems: []string{`ns1/labelled: host "merge.example.com": ServiceEntry ns1/first of this namespace defines it first, with another labels`},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := rigs.ObjectsOf([]byte(seNamespaces + "---\n" + tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			g := rigs.NewGraph(t, objs...)
			for name, want := range tc.clusters {
				set := g.CLAs.GetKey(name)
				if set == nil || set.Shared == nil {
					t.Fatalf("%s: no shared CLA", name)
				}
				got := &endpoint.ClusterLoadAssignment{}
				if err := proto.Unmarshal(set.Shared.Body, got); err != nil {
					t.Fatal(err)
				}
				if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
					t.Errorf("%s (-istiod +krteds):\n%s", name, d)
				}
			}
			for _, name := range tc.absent {
				if set := g.CLAs.GetKey(name); set != nil {
					t.Errorf("%s has a CLA, and must not", name)
				}
			}
			var all []string
			g.Await(t, "the problems reported", func() (bool, string) {
				all = all[:0]
				for _, op := range g.Problems.List() {
					for _, p := range op.Problems {
						all = append(all, p.Object+": "+p.Detail)
					}
				}
				missing := missingProblems(all, tc.problems)
				return len(missing) == 0, fmt.Sprintf("%q not reported; reported: %q", missing, all)
			})
			if len(tc.problems) == 0 && len(all) > 0 {
				t.Errorf("unexpected problems: %q", all)
			}
		})
	}
}

func missingProblems(all, want []string) []string {
	var missing []string
	for _, w := range want {
		found := false
		for _, a := range all {
			found = found || strings.Contains(a, w)
		}
		if !found {
			missing = append(missing, w)
		}
	}
	return missing
}

// TestDNSServiceEntryClusters holds the CDS clusters of DNS entries to istiod's buildCluster:
// STRICT_DNS for DNS (LOGICAL_DNS for DNS_ROUND_ROBIN) carrying the endpoints Envoy resolves (the
// host itself when the entry lists none), IPv4 lookups, the mesh refresh rate, the records' TTL.
// A DNS_ROUND_ROBIN host keeps the first endpoint of each port, of all its namespace's entries
// (mergeServicesInstancesByNamespaceHost).
func TestDNSServiceEntryClusters(t *testing.T) {
	objs, err := rigs.ObjectsOf([]byte(seNamespaces + "---\n" + dnsEntry + `---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr, namespace: ns1}
spec:
  hosts: [rr.example.com]
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints:
  - {address: a.rr.example.com, ports: {http: 8080}, locality: r1/z1}
  - {address: a2.rr.example.com}
---
apiVersion: networking.istio.io/v1
kind: ServiceEntry
metadata: {name: rr-later, namespace: ns1, creationTimestamp: "2026-01-01T00:00:00Z"}
spec:
  hosts: [rr.example.com]
  resolution: DNS_ROUND_ROBIN
  ports: [{number: 80, name: http, protocol: HTTP}]
  endpoints: [{address: b.rr.example.com}]
`))
	if err != nil {
		t.Fatal(err)
	}
	g := rigs.NewGraph(t, objs...)
	for _, tc := range []struct {
		name string
		typ  cluster.Cluster_DiscoveryType
		la   *endpoint.ClusterLoadAssignment
	}{
		{"outbound|443||dns.example.com", cluster.Cluster_STRICT_DNS, seCLA("outbound|443||dns.example.com",
			sloc{eps: []sep{{addr: "dns.example.com", port: 443, workload: "dns;ns1;dns;;Kubernetes"}}})},
		{"outbound|80||rr.example.com", cluster.Cluster_LOGICAL_DNS, seCLA("outbound|80||rr.example.com",
			sloc{region: "r1", zone: "z1", eps: []sep{{addr: "a.rr.example.com", port: 8080, workload: "rr-0;ns1;rr-0;;Kubernetes"}}})},
	} {
		set := g.Clusters.GetKey(tc.name)
		if set == nil || set.Shared == nil {
			t.Fatalf("%s: no cluster", tc.name)
		}
		c := &cluster.Cluster{}
		if err := proto.Unmarshal(set.Shared.Body, c); err != nil {
			t.Fatal(err)
		}
		if c.GetType() != tc.typ || c.DnsLookupFamily != cluster.Cluster_V4_ONLY || !c.RespectDnsTtl || //nolint:staticcheck // istiod sets it
			c.DnsRefreshRate.AsDuration() != time.Minute || c.EdsClusterConfig != nil { //nolint:staticcheck // istiod sets it
			t.Errorf("%s: %v", tc.name, c)
		}
		if d := cmp.Diff(tc.la, c.LoadAssignment, protocmp.Transform()); d != "" {
			t.Errorf("%s load assignment (-istiod +krteds):\n%s", tc.name, d)
		}
		if err := c.ValidateAll(); err != nil {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}
