package registry

import (
	"fmt"
	"slices"
	"testing"

	"github.com/google/go-cmp/cmp"
	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/transformtest"
)

// sliceFixture builds the inputs of the slice transform from plain objects.
func sliceFixture(t *testing.T, objs ...any) SliceInputs {
	t.Helper()
	stop := test.NewStop(t)
	cfg := collections.DefaultConfig()
	var svcs []*collections.ServiceInfo
	for _, o := range objs {
		switch o := o.(type) {
		case *corev1.Service:
			svcs = append(svcs, ConvertService(cfg, o, nil))
		case *corev1.Pod, *corev1.Node, *corev1.Namespace:
		default:
			t.Fatalf("unexpected fixture %T", o)
		}
	}
	return SliceInputs{
		Services:  krt.NewStaticCollection(nil, svcs, krt.WithStop(stop)),
		Workloads: StaticWorkloadInputs(test.NewStop(t), objs...),
	}
}

func runSlice(t *testing.T, slice *discovery.EndpointSlice, objs ...any) (*collections.SliceEndpoints, []collections.Problem) {
	t.Helper()
	in := sliceFixture(t, objs...)
	probs, out := SliceEndpointsOf(collections.DefaultConfig(), in).Fn(krt.TestingDummyContext{}, collections.NewSlice(slice))
	return out, transformtest.ProblemsOf(probs)
}

func TestEndpointHealth(t *testing.T) {
	T, F := fixtures.Ptr(true), fixtures.Ptr(false)
	plain := &collections.ServiceInfo{Name: "s"}
	cookie := &collections.ServiceInfo{Name: "s", PersistentSession: true}
	header := &collections.ServiceInfo{Name: "s", PersistentSessionHeader: true}
	type c = discovery.EndpointConditions
	cases := []struct {
		name string
		svc  *collections.ServiceInfo
		cond c
		want collections.HealthStatus
	}{
		{"all nil is healthy", plain, c{}, collections.Healthy},
		{"ready true", plain, c{Ready: T}, collections.Healthy},
		{"ready true, serving false is still healthy", plain, c{Ready: T, Serving: F, Terminating: T}, collections.Healthy},
		{"ready false, serving and terminating nil → terminating (nil counts as true)", plain, c{Ready: F}, collections.Terminating},
		{"ready false, serving false, terminating false → unhealthy", plain, c{Ready: F, Serving: F, Terminating: F}, collections.UnHealthy},
		{"ready false, serving true, terminating true → terminating", plain, c{Ready: F, Serving: T, Terminating: T}, collections.Terminating},
		{"ready false, serving false, terminating true → terminating", plain, c{Ready: F, Serving: F, Terminating: T}, collections.Terminating},
		{"ready false, serving true, terminating false → unhealthy", plain, c{Ready: F, Serving: T, Terminating: F}, collections.UnHealthy},
		{"ready false, serving nil, terminating false → unhealthy", plain, c{Ready: F, Terminating: F}, collections.UnHealthy},
		{"persistent cookie: serving+terminating → draining", cookie, c{Ready: F, Serving: T, Terminating: T}, collections.Draining},
		{"persistent header: serving+terminating → draining", header, c{Ready: F, Serving: T, Terminating: T}, collections.Draining},
		{"persistent: nil serving/terminating → draining", cookie, c{Ready: F}, collections.Draining},
		{"persistent: not serving, terminating → terminating", cookie, c{Ready: F, Serving: F, Terminating: T}, collections.Terminating},
		{"persistent: serving, not terminating → unhealthy", cookie, c{Ready: F, Serving: T, Terminating: F}, collections.UnHealthy},
		{"no service: nil conditions but ready false → unhealthy", nil, c{Ready: F}, collections.UnHealthy},
		{"no service: terminating → unhealthy", nil, c{Ready: F, Serving: T, Terminating: T}, collections.UnHealthy},
		{"no service: ready nil → healthy", nil, c{}, collections.Healthy},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := EndpointHealth(tc.svc, tc.cond); got != tc.want {
				t.Fatalf("got %v want %v", got, tc.want)
			}
		})
	}
}

func TestSliceEndpointsWholeOutput(t *testing.T) {
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	pod := fixtures.Pod("ns1", "foo-1", "foo", "10.1.0.1", "n1")
	pod.Labels["security.istio.io/tlsMode"] = "istio"
	slice := fixtures.Slice("ns1", "foo-abc", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.1.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.9.9.9", Cond: fixtures.NotReady},
	)
	out, problems := runSlice(t, slice, svc, pod, fixtures.ZoneNode("n1", "r1", "z1"))
	if len(problems) != 0 {
		t.Fatalf("problems: %v", problems)
	}
	in := sliceFixture(t, pod, fixtures.ZoneNode("n1", "r1", "z1"))
	podMeta := workloadFn(collections.DefaultConfig(), in.Workloads)(pod).Meta
	want := &collections.SliceEndpoints{Namespace: "ns1", Name: "foo-abc", Service: "foo", Endpoints: []collections.Endpoint{
		{Address: "10.1.0.1", Port: 8080, PortName: "http", Health: collections.Healthy, Slice: "foo-abc", Pod: "ns1/foo-1", Meta: podMeta},
		{Address: "10.9.9.9", Port: 8080, PortName: "http", Health: collections.UnHealthy, Slice: "foo-abc",
			Meta: collections.NewEndpointMeta(
				collections.WorkloadMeta{
					TLSMode: "disabled",
				},
				collections.TopologyMeta{
					ClusterID: "Kubernetes",
				},
				"", "")},
	}, Cause: collections.Cause{Kind: "EndpointSlice", Name: "ns1/foo-abc"}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("slice endpoints (-want +got):\n%s", diff)
	}
}

// TestSliceCause: the input change behind a slice's endpoints is the slice's version, or a Pod
// it names seen later; a slice without a trigger time takes the latest readiness change of its
// Pods that krteds could have seen by the slice's version.
func TestSliceCause(t *testing.T) {
	slice := &collections.Slice{Key: "ns1/s", Version: "7", Stamped: 100, Trigger: 100, Seen: 200}
	pod := func(name string, ready, seen int64) collections.Workload {
		return collections.Workload{Key: "ns1/" + name, Cause: collections.Cause{Kind: "Pod", Name: "ns1/" + name, Version: "3", Trigger: ready, Seen: seen}}
	}
	for _, tc := range []struct {
		name      string
		trigger   int64
		workloads Workloads
		want      collections.Cause
	}{
		{"the slice", 100, Workloads{pod("a", 50, 150)}, collections.Cause{Kind: "EndpointSlice", Name: "ns1/s", Version: "7", Trigger: 100, Seen: 200,
			TriggerFrom: collections.TriggerStamped}},
		{"a Pod seen after the slice", 100, Workloads{pod("a", 50, 150), pod("b", 250, 300)}, collections.Cause{Kind: "Pod", Name: "ns1/b", Version: "3", Trigger: 250, Seen: 300}},
		{"no trigger: the latest readiness seen by then", 0, Workloads{pod("a", 50, 150), pod("b", 180, 190), pod("c", 400, 10)},
			collections.Cause{Kind: "EndpointSlice", Name: "ns1/s", Version: "7", Trigger: 180, Seen: 200, TriggerFrom: collections.TriggerReady}},
		{"no trigger, no Pod", 0, nil, collections.Cause{Kind: "EndpointSlice", Name: "ns1/s", Version: "7", Seen: 200}},
		{"the controller's, unstamped: no Pod's change", -2, Workloads{pod("a", 50, 150), pod("b", 180, 190)},
			collections.Cause{Kind: "EndpointSlice", Name: "ns1/s", Version: "7", Seen: 200}},
		{"a stamp carried over from the version before: none", -1, Workloads{pod("a", 50, 150)}, collections.Cause{Kind: "EndpointSlice", Name: "ns1/s", Version: "7", Seen: 200}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := *slice
			s.Trigger = tc.trigger
			if tc.trigger == 0 {
				s.Stamped = 0 // never stamped
			}
			if tc.trigger == -1 {
				s.Stamped, s.Trigger = 90, 0
			}
			if tc.trigger == -2 {
				s.Stamped, s.Trigger, s.Controlled = 0, 0, true
			}
			if got := sliceCause(&s, tc.workloads); got != tc.want {
				t.Fatalf("cause %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestSliceRules(t *testing.T) {
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	cookieSvc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	cookieSvc.Labels = map[string]string{"istio.io/persistent-session": "x"}
	T, F := fixtures.Ptr(true), fixtures.Ptr(false)
	ep := func(ip, pod string, cond discovery.EndpointConditions) fixtures.Endpoint {
		return fixtures.Endpoint{IP: ip, Pod: pod, Cond: cond}
	}
	// v6 is a slice of address type IPv6 with these endpoints.
	v6 := func(eps ...fixtures.Endpoint) *discovery.EndpointSlice {
		s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, eps...)
		s.AddressType = discovery.AddressTypeIPv6
		return s
	}
	podA := fixtures.Pod("ns1", "a", "foo", "10.0.0.1", "")
	podB := fixtures.Pod("ns1", "b", "foo", "10.0.0.2", "")
	cases := []struct {
		name   string
		slice  *discovery.EndpointSlice
		objs   []any
		want   map[string]collections.HealthStatus
		nilOut bool
		// ignored: the slice gives no endpoint and says why (SliceEndpoints.Ignored).
		ignored  string
		problems []string
	}{
		{
			name: "health of every condition combination (§10.1)",
			slice: fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice,
				ep("10.1.0.1", "", fixtures.Conditions(nil, nil, nil)),
				ep("10.1.0.2", "", fixtures.Conditions(T, nil, nil)),
				ep("10.1.0.3", "", fixtures.Conditions(F, F, F)),
				ep("10.1.0.4", "", fixtures.Conditions(F, nil, nil)),
				ep("10.1.0.5", "", fixtures.Conditions(F, T, T)),
			),
			objs: []any{svc},
			want: map[string]collections.HealthStatus{"10.1.0.1": collections.Healthy, "10.1.0.2": collections.Healthy,
				"10.1.0.3": collections.UnHealthy, "10.1.0.4": collections.Terminating, "10.1.0.5": collections.Terminating},
		},
		{
			name:  "persistent session keeps serving terminating endpoints as draining",
			slice: fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.1.0.5", "", fixtures.TerminatingServing)),
			objs:  []any{cookieSvc},
			want:  map[string]collections.HealthStatus{"10.1.0.5": collections.Draining},
		},
		{
			name:  "slice before its service: not-ready is unhealthy",
			slice: fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.1.0.4", "", fixtures.Conditions(F, nil, nil))),
			want:  map[string]collections.HealthStatus{"10.1.0.4": collections.UnHealthy},
		},
		{
			name:  "targetRef pod missing: endpoint left out, others kept",
			slice: fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.1", "a", fixtures.Ready), ep("10.0.0.9", "missing", fixtures.Ready)),
			objs:  []any{svc, podA},
			want:  map[string]collections.HealthStatus{"10.0.0.1": collections.Healthy},
		},
		{
			name: "MCS slice ignored",
			slice: func() *discovery.EndpointSlice {
				s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.1", "", fixtures.Ready))
				s.Labels["multicluster.kubernetes.io/service-name"] = "foo"
				return s
			}(),
			objs:    []any{svc},
			ignored: collections.ReasonMCSSlice,
		},
		{
			name: "FQDN slice ignored",
			slice: func() *discovery.EndpointSlice {
				s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("foo.example.com", "", fixtures.Ready))
				s.AddressType = discovery.AddressTypeFQDN
				return s
			}(),
			objs:    []any{svc},
			ignored: collections.ReasonFQDNSlice,
		},
		{
			name:  "IPv6 slice processed",
			slice: v6(ep("fd00::1", "", fixtures.Ready)),
			objs:  []any{svc},
			want:  map[string]collections.HealthStatus{"fd00::1": collections.Healthy},
		},
		{
			// A long or upper-case spelling of an address is served in its canonical form.
			name:  "IPv6 address in a long spelling served canonical",
			slice: v6(ep("FD00:0:0:0:0:0:0:0001", "", fixtures.Ready)),
			objs:  []any{svc},
			want:  map[string]collections.HealthStatus{"fd00::1": collections.Healthy},
		},
		{
			// Kubernetes' validateEndpoints wants IPv4 addresses in an IPv4 slice (IsIPv4String)
			// and IPv6 ones in an IPv6 slice (IsIPv6String).
			name:     "IPv6 address in an IPv4 slice skipped and reported, the rest kept",
			slice:    fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("fd00::1", "", fixtures.Ready), ep("10.0.0.7", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"10.0.0.7": collections.Healthy},
			problems: []string{collections.ReasonAddressFamily},
		},
		{
			name:     "IPv4 address in an IPv6 slice skipped and reported, the rest kept",
			slice:    v6(ep("10.0.0.7", "", fixtures.Ready), ep("fd00::7", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"fd00::7": collections.Healthy},
			problems: []string{collections.ReasonAddressFamily},
		},
		{
			// net/netip accepts a zone; net.ParseIP, which Kubernetes validation uses, does not.
			name:     "zoned IPv6 address skipped and reported",
			slice:    v6(ep("fe80::1%eth0", "", fixtures.Ready), ep("fd00::7", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"fd00::7": collections.Healthy},
			problems: []string{collections.ReasonZonedAddress},
		},
		{
			name:     "zoned address in an IPv4 slice reported as zoned",
			slice:    fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("fe80::1%eth1", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{},
			problems: []string{collections.ReasonZonedAddress},
		},
		{
			// IsValidIP (strict, always used for IPv6 slices) rejects "must not be an
			// IPv4-mapped IPv6 address", and IsIPv6String is false for it.
			name:     "IPv4-mapped IPv6 address in an IPv6 slice skipped and reported",
			slice:    v6(ep("::ffff:10.0.0.8", "", fixtures.Ready), ep("fd00::7", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"fd00::7": collections.Healthy},
			problems: []string{collections.ReasonMappedAddress},
		},
		{
			// Rejected in IPv4 slices too by strict IP validation (StrictIPCIDRValidation, on by
			// default since Kubernetes 1.36); not guessed to be 10.0.0.8.
			name:     "IPv4-mapped IPv6 address in an IPv4 slice skipped and reported",
			slice:    fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("::ffff:10.0.0.8", "", fixtures.Ready), ep("10.0.0.7", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"10.0.0.7": collections.Healthy},
			problems: []string{collections.ReasonMappedAddress},
		},
		{
			name: "slice without service-name label is skipped and reported",
			slice: func() *discovery.EndpointSlice {
				s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.1", "", fixtures.Ready))
				delete(s.Labels, "kubernetes.io/service-name")
				return s
			}(),
			objs:     []any{svc},
			nilOut:   true,
			problems: []string{collections.ReasonSliceNoServiceName},
		},
		{
			name:     "invalid IP skipped and reported, the rest kept",
			slice:    fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("not-an-ip", "", fixtures.Ready), ep("10.0.0.7", "", fixtures.Ready)),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"10.0.0.7": collections.Healthy},
			problems: []string{collections.ReasonInvalidAddress},
		},
		{
			name: "nil port skipped and reported, other ports kept",
			slice: func() *discovery.EndpointSlice {
				s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.7", "", fixtures.Ready))
				s.Ports = append(s.Ports, discovery.EndpointPort{Name: fixtures.Ptr("grpc")})
				return s
			}(),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"10.0.0.7": collections.Healthy},
			problems: []string{collections.ReasonNilPort},
		},
		{
			name: "port name the service lacks skipped and reported",
			slice: func() *discovery.EndpointSlice {
				s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.7", "", fixtures.Ready))
				s.Ports = append(s.Ports, discovery.EndpointPort{Name: fixtures.Ptr("metrics"), Port: fixtures.Ptr(int32(9090))})
				return s
			}(),
			objs:     []any{svc},
			want:     map[string]collections.HealthStatus{"10.0.0.7": collections.Healthy},
			problems: []string{collections.ReasonUnknownPortName},
		},
		{
			name: "targetRef to another kind: reported, address looked up",
			slice: func() *discovery.EndpointSlice {
				s := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.1", "", fixtures.Ready))
				s.Endpoints[0].TargetRef = &corev1.ObjectReference{Kind: "Node", Name: "n1"}
				return s
			}(),
			objs:     []any{svc, podA},
			want:     map[string]collections.HealthStatus{"10.0.0.1": collections.Healthy},
			problems: []string{collections.ReasonTargetRefKind},
		},
		{
			name:  "no targetRef: ready pod with that IP in the same namespace",
			slice: fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice, ep("10.0.0.2", "", fixtures.Ready)),
			objs:  []any{svc, podB},
			want:  map[string]collections.HealthStatus{"10.0.0.2": collections.Healthy},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, problems := runSlice(t, tc.slice, tc.objs...)
			if tc.nilOut {
				if out != nil {
					t.Fatalf("want no output, got %+v", out)
				}
			} else if tc.ignored != "" {
				if out == nil || out.Ignored != tc.ignored || len(out.Endpoints) != 0 {
					t.Fatalf("want no endpoint, ignored as %s; got %+v", tc.ignored, out)
				}
			} else if diff := cmp.Diff(tc.want, transformtest.Health(out)); diff != "" {
				t.Fatalf("health (-want +got):\n%s", diff)
			}
			var reasons []string
			for _, p := range problems {
				reasons = append(reasons, p.Reason)
				if p.Object != "ns1/s" || p.Kind != "EndpointSlice" {
					t.Fatalf("problem must name the slice: %+v", p)
				}
			}
			if diff := cmp.Diff(tc.problems, reasons); diff != "" {
				t.Fatalf("problems (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNoTargetRefLookup(t *testing.T) {
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	other := fixtures.Pod("ns2", "other", "foo", "10.0.0.5", "")
	notReady := fixtures.Pod("ns1", "nr", "foo", "10.0.0.6", "")
	notReady.Status.Conditions[0].Status = corev1.ConditionFalse
	hostA := fixtures.Pod("ns1", "host-b", "foo", "10.0.0.8", "")
	hostB := fixtures.Pod("ns1", "host-a", "foo", "10.0.0.8", "")
	slice := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.5", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.6", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.8", Cond: fixtures.Ready},
	)
	out, _ := runSlice(t, slice, svc, other, notReady, hostA, hostB)
	got := map[string]string{}
	for _, e := range out.Endpoints {
		got[e.Address] = e.Pod
	}
	want := map[string]string{"10.0.0.5": "", "10.0.0.6": "", "10.0.0.8": "ns1/host-a"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("pods by IP (-want +got):\n%s", diff)
	}
}

func TestServiceEndpointsMergeSlices(t *testing.T) {
	mk := func(ip, slice string, h collections.HealthStatus, port uint32) collections.Endpoint {
		return collections.Endpoint{Address: ip, Port: port, PortName: "http", Health: h, Slice: slice}
	}
	stop := test.NewStop(t)
	slices := krt.NewStaticCollection(nil, []collections.SliceEndpoints{
		{Namespace: "ns1", Name: "b", Service: "foo", Endpoints: []collections.Endpoint{
			mk("10.0.0.10", "b", collections.Healthy, 8080), mk("10.0.0.2", "b", collections.UnHealthy, 8080), mk("10.0.0.3", "b", collections.Healthy, 8081),
		}},
		{Namespace: "ns1", Name: "a", Service: "foo", Endpoints: []collections.Endpoint{
			mk("10.0.0.2", "a", collections.Healthy, 8080), mk("10.0.0.3", "a", collections.Healthy, 8080),
		}},
		{Namespace: "ns1", Name: "c", Service: "bar", Endpoints: []collections.Endpoint{mk("10.0.0.99", "c", collections.Healthy, 80)}},
	}, krt.WithStop(stop))
	wes := krt.NewStaticCollection[collections.WorkloadEntry](nil, nil, krt.WithStop(stop))
	in := ServiceEndpointInputs{Slices: slices, SlicesByService: krt.NewIndex(slices, "byService", SliceService),
		ServiceEntries:  krt.NewStaticCollection[collections.ServiceEntry](nil, nil, krt.WithStop(stop)),
		WorkloadEntries: wes, WorkloadEntriesByNamespace: krt.NewIndex(wes, "byNamespace", ByNamespace), Workloads: StaticWorkloadInputs(test.NewStop(t))}
	out := ServiceEndpointsOf(collections.DefaultConfig(), in).Fn(krt.TestingDummyContext{},
		&collections.ServiceInfo{Name: "foo", Namespace: "ns1", Hostname: "foo.ns1.svc.cluster.local"})
	want := &collections.ServiceEndpoints{Hostname: "foo.ns1.svc.cluster.local", Namespace: "ns1", Name: "foo", ClusterID: "Kubernetes",
		Endpoints: collections.AppendRefs(nil, []collections.Endpoint{
			mk("10.0.0.2", "a", collections.Healthy, 8080), // healthiest copy wins
			mk("10.0.0.3", "a", collections.Healthy, 8080), // equal health: lowest slice name
			mk("10.0.0.10", "b", collections.Healthy, 8080),
		}),
		Dropped: []collections.DroppedCopy{
			{Address: "10.0.0.2", PortName: "http", Slice: "b", Health: collections.UnHealthy, KeptSlice: "a", KeptHealth: collections.Healthy},
			{Address: "10.0.0.3", PortName: "http", Slice: "b", Health: collections.Healthy, KeptSlice: "a", KeptHealth: collections.Healthy},
		}}
	if diff := cmp.Diff(want, out); diff != "" {
		t.Fatalf("merged (-want +got):\n%s", diff)
	}
}

func ExampleParseExportTo() {
	fmt.Println(ParseExportTo("ns-b, ., ns-a"))
	// Output: [. ns-a ns-b]
}

// The ready-by-IP index holds many IPs per key: a lookup finds only the workload with that exact
// IP, never another Pod whose IP shares the bucket.
func TestIPLookupKeepsOnlyThatIP(t *testing.T) {
	owner := "10.1.0.1"
	neighbour := ""
	for i := 2; i < 1<<16 && neighbour == ""; i++ {
		if ip := fmt.Sprintf("10.1.%d.%d", i>>8, i&255); IPBucket(ip) == IPBucket(owner) {
			neighbour = ip
		}
	}
	if neighbour == "" {
		t.Fatal("no IP shares a bucket with " + owner)
	}
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	pod := fixtures.Pod("ns1", "foo-1", "foo", owner, "n1")
	slice := fixtures.Slice("ns1", "foo-abc", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: owner, Cond: fixtures.Ready},
		fixtures.Endpoint{IP: neighbour, Cond: fixtures.Ready},
	)
	out, _ := runSlice(t, slice, svc, pod)
	pods := map[string]string{}
	for _, e := range out.Endpoints {
		pods[e.Address] = e.Pod
	}
	if pods[owner] != "ns1/foo-1" || pods[neighbour] != "" || len(pods) != 2 {
		t.Fatalf("endpoint pods %v (neighbour %s)", pods, neighbour)
	}
}

// TestPendingPodsAreCounted: an endpoint whose Pod does not exist yet is left out and counted
// (istiod's pilot_k8s_endpoints_pending_pod), once per endpoint whatever its addresses.
func TestPendingPodsAreCounted(t *testing.T) {
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.3", Pod: "foo-3", Cond: fixtures.Ready})
	slice.Endpoints[2].Addresses = append(slice.Endpoints[2].Addresses, "10.0.0.4")
	out, _ := runSlice(t, slice, fixtures.Service("ns1", "foo", fixtures.HTTP...), fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", ""))
	if out.PendingPods != 2 || len(out.Endpoints) != 1 {
		t.Fatalf("pending %d, endpoints %d; want 2 pending, 1 endpoint", out.PendingPods, len(out.Endpoints))
	}
}

// TestSliceLeavesOutWithItsReason: every address the transform makes no endpoint of is recorded
// with the rule that left it out (what krteds explain reports): a Pod not arrived (per address),
// an address that is not an IP, one of the other family; the problems of the slice are the
// same details.
func TestSliceLeavesOutWithItsReason(t *testing.T) {
	slice := fixtures.Slice("ns1", "foo-a", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "foo-1", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "foo-2", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "not-an-ip", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "fd00::1", Cond: fixtures.Ready})
	slice.Endpoints[1].Addresses = append(slice.Endpoints[1].Addresses, "10.0.0.3")
	out, problems := runSlice(t, slice, fixtures.Service("ns1", "foo", fixtures.HTTP...), fixtures.Pod("ns1", "foo-1", "foo", "10.0.0.1", ""))
	var got []string
	for _, l := range out.Left {
		got = append(got, fmt.Sprintf("%d %s %s", l.Endpoint, l.Address, l.Reason))
	}
	want := []string{"1 10.0.0.2 pod_pending", "1 10.0.0.3 pod_pending", "2 not-an-ip invalid_address", "3 fd00::1 " + collections.ReasonAddressFamily}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Fatalf("left out (-want +got):\n%s", diff)
	}
	for _, l := range out.Left[2:] {
		if !slices.ContainsFunc(problems, func(p collections.Problem) bool { return p.Detail == l.Detail && p.Reason == l.Reason }) {
			t.Errorf("%s left out as %s but not reported as a problem (%v)", l.Address, l.Reason, problems)
		}
	}
	if len(problems) != 2 {
		t.Errorf("problems %v: a Pod not arrived is not a problem of the slice", problems)
	}
}

// TestSliceEndpointsTakeTheirOwnPod: each endpoint carries the workload of the Pod its targetRef
// names, whatever the order of the slice's endpoints (a rolling update appends the new Pod after
// the others) and when two endpoints name one Pod. The keys handed to the fetch are sorted by it.
func TestSliceEndpointsTakeTheirOwnPod(t *testing.T) {
	svc := fixtures.Service("ns1", "foo", fixtures.HTTP...)
	pods := []any{svc,
		fixtures.ZoneNode("n1", "r1", "z1"), fixtures.ZoneNode("n2", "r1", "z2"), fixtures.ZoneNode("n3", "r1", "z3"),
		fixtures.Pod("ns1", "a", "foo", "10.0.0.1", "n1"),
		fixtures.Pod("ns1", "b", "foo", "10.0.0.2", "n2"),
		fixtures.Pod("ns1", "c", "foo", "10.0.0.3", "n3"),
	}
	slice := fixtures.Slice("ns1", "s", "foo", fixtures.HTTPSlice,
		fixtures.Endpoint{IP: "10.0.0.3", Pod: "c", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.1", Pod: "a", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.9", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.2", Pod: "b", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.4", Pod: "missing", Cond: fixtures.Ready},
		fixtures.Endpoint{IP: "10.0.0.11", Pod: "a", Cond: fixtures.Ready},
	)
	out, _ := runSlice(t, slice, pods...)
	want := map[string]struct{ pod, zone string }{
		"10.0.0.3": {"ns1/c", "z3"}, "10.0.0.1": {"ns1/a", "z1"}, "10.0.0.9": {"", ""},
		"10.0.0.2": {"ns1/b", "z2"}, "10.0.0.11": {"ns1/a", "z1"},
	}
	got := map[string]struct{ pod, zone string }{}
	for _, e := range out.Endpoints {
		got[e.Address] = struct{ pod, zone string }{e.Pod, e.Meta.Locality.Zone}
	}
	if diff := cmp.Diff(want, got, cmp.AllowUnexported(struct{ pod, zone string }{})); diff != "" {
		t.Fatalf("endpoint → (pod, zone) (-want +got):\n%s", diff)
	}
	if out.PendingPods != 1 {
		t.Errorf("PendingPods = %d, want 1", out.PendingPods)
	}
}
