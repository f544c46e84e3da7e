// Package bench generates synthetic meshes and measures krteds on them with real ADS clients.
package bench

import (
	"fmt"
	"os"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// Size describes a synthetic mesh.
type Size struct {
	Name string
	// Services × EndpointsPerService endpoints, spread over Nodes in Zones zones of Regions regions.
	Services, EndpointsPerService int
	Nodes, Zones, Regions         int
	// Proxies connect as sidecars, spread over Classes localities; each subscribes to
	// SubscribedServices clusters (0 = all).
	Proxies, Classes   int
	SubscribedServices int
	// PreferCloseEvery makes every n-th service use trafficDistribution: PreferClose (0 = none),
	// so its CLAs depend on the proxy class.
	PreferCloseEvery int
}

// Sizes are the documented benchmark sizes.
var Sizes = map[string]Size{
	"small":  {Name: "small", Services: 100, EndpointsPerService: 10, Nodes: 20, Zones: 4, Regions: 2, Proxies: 10, Classes: 4, PreferCloseEvery: 10},
	"medium": {Name: "medium", Services: 1000, EndpointsPerService: 10, Nodes: 100, Zones: 6, Regions: 3, Proxies: 100, Classes: 6, PreferCloseEvery: 10},
	"large": {Name: "large", Services: 10000, EndpointsPerService: 10, Nodes: 1000, Zones: 6, Regions: 3, Proxies: 1000, Classes: 6,
		SubscribedServices: 200, PreferCloseEvery: 10},
}

// CurrentSize is chosen by KRTEDS_BENCH_SIZE (small, medium, large; default small);
// KRTEDS_BENCH_ENDPOINTS overrides the endpoints per service (at most 64).
func CurrentSize() Size {
	s, ok := Sizes[os.Getenv("KRTEDS_BENCH_SIZE")]
	if !ok {
		s = Sizes["small"]
	}
	if n, err := strconv.Atoi(os.Getenv("KRTEDS_BENCH_ENDPOINTS")); err == nil && n > 0 && n <= 64 {
		s.EndpointsPerService = n
	}
	return s
}

// Endpoints is the number of endpoints of the mesh.
func (s Size) Endpoints() int { return s.Services * s.EndpointsPerService }

// Mesh is the generated objects.
type Mesh struct {
	Size       Size
	Namespaces []*corev1.Namespace
	Nodes      []*corev1.Node
	Services   []*corev1.Service
	Pods       []*corev1.Pod
	Slices     []*discovery.EndpointSlice
}

const (
	meshNamespace = "bench"
	targetPort    = 8080
	sliceSize     = 100
	// A Pod replaced (the churn's replace) gets endpoint number firstReplacement + the
	// replacement's generation modulo replacements: a new address each time, within the 64 a
	// service's PodIPs keep unique, past the endpoints a service has and its one scaled up.
	firstReplacement = 16
	replacements     = 64 - firstReplacement
)

// ServiceName of the i-th service.
func ServiceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// ClusterName of the i-th service.
func ClusterName(i int) string {
	return fmt.Sprintf("outbound|80||%s.%s.svc.cluster.local", ServiceName(i), meshNamespace)
}

// ZoneOf returns the region and zone of the z-th zone.
func (s Size) ZoneOf(z int) (string, string) {
	r := z % s.Regions
	return fmt.Sprintf("region-%d", r), fmt.Sprintf("region-%d-zone-%d", r, z)
}

// PodIP of endpoint j of service i.
func PodIP(i, j int) string {
	n := i*64 + j // up to 64 endpoints per service keep IPs unique
	return fmt.Sprintf("10.%d.%d.%d", 1+n>>16&255, n>>8&255, n&255)
}

// Generate builds the mesh's objects as Kubernetes would have them.
func Generate(s Size) *Mesh {
	m := &Mesh{Size: s}
	m.Namespaces = []*corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: meshNamespace}}}
	for n := 0; n < s.Nodes; n++ {
		region, zone := s.ZoneOf(n % s.Zones)
		m.Nodes = append(m.Nodes, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName(n),
			Labels: map[string]string{"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone}}})
	}
	for i := 0; i < s.Services; i++ {
		name := ServiceName(i)
		svc := &corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: meshNamespace},
			Spec: corev1.ServiceSpec{ClusterIP: fmt.Sprintf("10.96.%d.%d", i>>8&255, i&255), Selector: map[string]string{"app": name},
				Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(targetPort)}}},
		}
		if s.PreferCloseEvery > 0 && i%s.PreferCloseEvery == 0 {
			pc := corev1.ServiceTrafficDistributionPreferClose
			svc.Spec.TrafficDistribution = &pc
		}
		m.Services = append(m.Services, svc)
		var slice *discovery.EndpointSlice
		for j := 0; j < s.EndpointsPerService; j++ {
			node, zone := s.placement(i, j)
			pod := Pod(i, j, node)
			m.Pods = append(m.Pods, pod)
			if j%sliceSize == 0 {
				slice = newSlice(i, j/sliceSize)
				m.Slices = append(m.Slices, slice)
			}
			slice.Endpoints = append(slice.Endpoints, endpointOf(pod, zone))
		}
	}
	return m
}

// NodeName is the name of the n-th node.
func NodeName(n int) string { return fmt.Sprintf("node-%04d", n) }

// placement is the node endpoint j of service i runs on, and its zone.
func (s Size) placement(i, j int) (node, zone string) {
	n := (i + j) % s.Nodes
	_, zone = s.ZoneOf(n % s.Zones)
	return NodeName(n), zone
}

// newSlice is the k-th EndpointSlice of service i, without endpoints.
func newSlice(i, k int) *discovery.EndpointSlice {
	name := ServiceName(i)
	return &discovery.EndpointSlice{
		ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, k), Namespace: meshNamespace, Labels: map[string]string{"kubernetes.io/service-name": name}},
		AddressType: discovery.AddressTypeIPv4,
		Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(targetPort)), Protocol: ptr(corev1.ProtocolTCP)}},
	}
}

// endpointOf is a ready Pod's endpoint in a slice, as the EndpointSlice controller writes it
// (the sources reduce it).
func endpointOf(pod *corev1.Pod, zone string) discovery.Endpoint {
	e := discovery.Endpoint{Conditions: discovery.EndpointConditions{Ready: ptr(true), Serving: ptr(true), Terminating: ptr(false)},
		NodeName: ptr(pod.Spec.NodeName), Zone: ptr(zone)}
	setPod(&e, pod)
	return e
}

// setPod makes an endpoint the Pod's: its address and reference.
func setPod(e *discovery.Endpoint, pod *corev1.Pod) {
	e.Addresses = []string{pod.Status.PodIP}
	e.TargetRef = &corev1.ObjectReference{Kind: "Pod", Namespace: pod.Namespace, Name: pod.Name, UID: pod.UID}
}

// Pod is endpoint j of service i, running on node.
func Pod(i, j int, node string) *corev1.Pod {
	name := ServiceName(i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", name, j), Namespace: meshNamespace, GenerateName: name + "-5d9f7-",
			UID:             types.UID(fmt.Sprintf("00000000-0000-4000-8000-%06d%06d", i, j)),
			Labels:          map[string]string{"app": name, "version": "v1", "pod-template-hash": "5d9f7", "security.istio.io/tlsMode": "istio"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-5d9f7", Controller: ptr(true)}}},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: name},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: PodIP(i, j), PodIPs: []corev1.PodIP{{IP: PodIP(i, j)}},
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
}

// Objects lists every object.
func (m *Mesh) Objects() []any {
	var out []any
	for _, o := range m.Namespaces {
		out = append(out, o)
	}
	for _, o := range m.Nodes {
		out = append(out, o)
	}
	for _, o := range m.Services {
		out = append(out, o)
	}
	for _, o := range m.Pods {
		out = append(out, o)
	}
	for _, o := range m.Slices {
		out = append(out, o)
	}
	return out
}

// Subscriptions is the cluster list proxy p subscribes to.
func (s Size) Subscriptions(p int) []string {
	n := s.SubscribedServices
	if n == 0 || n > s.Services {
		n = s.Services
	}
	out := make([]string, 0, n)
	for k := 0; k < n; k++ {
		out = append(out, ClusterName((p*n+k)%s.Services))
	}
	return out
}

func ptr[T any](v T) *T { return &v }
