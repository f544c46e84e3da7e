package bench

import (
	"fmt"
	"strings"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/proto"
	"istio.io/istio/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"

	"github.com/krteds/krteds/collections"
)

// Rollout is a Deployment of N pods behind one service, in slices of sliceSize, restarted pod by
// pod: generation g's pods are replaced by generation g+1's.
type Rollout struct {
	Name    string
	N       int
	Gen     int
	Cluster string
	Service *corev1.Service
	Slices  []*discovery.EndpointSlice
	nodes   []string
	zones   []string // of each node
}

// NewRollout makes the service and its generation-0 pods and slices, all ready, on the mesh's
// nodes.
func NewRollout(m *Mesh, name string, n int) *Rollout {
	r := &Rollout{Name: name, N: n, Cluster: fmt.Sprintf("outbound|80||%s.%s.svc.cluster.local", name, meshNamespace)}
	for _, nd := range m.Nodes {
		r.nodes = append(r.nodes, nd.Name)
		r.zones = append(r.zones, nd.Labels[corev1.LabelTopologyZone])
	}
	r.Service = &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: meshNamespace},
		Spec: corev1.ServiceSpec{ClusterIP: "10.97.0.1", Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(targetPort)}}},
	}
	r.Slices = r.slicesOf(0)
	return r
}

func (r *Rollout) slicesOf(gen int) []*discovery.EndpointSlice {
	out := make([]*discovery.EndpointSlice, (r.N+sliceSize-1)/sliceSize)
	for s := range out {
		out[s] = &discovery.EndpointSlice{
			ObjectMeta:  metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", r.Name, s), Namespace: meshNamespace, Labels: map[string]string{"kubernetes.io/service-name": r.Name}},
			AddressType: discovery.AddressTypeIPv4,
			Ports:       []discovery.EndpointPort{{Name: ptr("http"), Port: ptr(int32(targetPort)), Protocol: ptr(corev1.ProtocolTCP)}},
		}
		for k := s * sliceSize; k < min((s+1)*sliceSize, r.N); k++ {
			out[s].Endpoints = append(out[s].Endpoints, r.endpoint(gen, k, true, true, false))
		}
	}
	return out
}

// PodName and PodIP of pod k of generation gen (IPs alternate between two ranges).
func (r *Rollout) PodName(gen, k int) string { return fmt.Sprintf("%s-g%d-%d", r.Name, gen, k) }

func (r *Rollout) PodIP(gen, k int) string {
	return fmt.Sprintf("10.200.%d.%d", (gen%2)*8+k/256, k%256)
}

// Pod k of generation gen.
func (r *Rollout) Pod(gen, k int, ready bool) *corev1.Pod {
	p := Pod(1, 0, r.nodes[k%len(r.nodes)])
	p.Name, p.Status.PodIP, p.Status.PodIPs = r.PodName(gen, k), r.PodIP(gen, k), []corev1.PodIP{{IP: r.PodIP(gen, k)}}
	p.Labels = map[string]string{"app": r.Name}
	if !ready {
		p.Status.Conditions[0].Status = corev1.ConditionFalse
	}
	_, _ = kube.StripPodUnusedFields(p)
	return p
}

func (r *Rollout) endpoint(gen, k int, ready, serving, terminating bool) discovery.Endpoint {
	return discovery.Endpoint{Addresses: []string{r.PodIP(gen, k)},
		Conditions: discovery.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
		TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: meshNamespace, Name: r.PodName(gen, k)}}
}

// Objects are the service, the current generation's pods and the slices.
func (r *Rollout) Objects() []any {
	out := []any{r.Service}
	for k := 0; k < r.N; k++ {
		out = append(out, r.Pod(r.Gen, k, true))
	}
	for _, s := range r.Slices {
		out = append(out, s)
	}
	return out
}

// Restart replaces every pod by one of the next generation, one at a time, as a Deployment's
// rolling update does: the new pod appears not ready, becomes ready, the old one terminates and
// goes. apply writes (or with del, removes) an object; pause runs after each pod.
func (r *Rollout) Restart(apply func(obj any, del bool), pause func()) {
	next := r.Gen + 1
	for k := 0; k < r.N; k++ {
		s := k / sliceSize
		idx := k % sliceSize
		write := func(edit func(sl *discovery.EndpointSlice)) {
			sl := r.Slices[s].DeepCopy()
			edit(sl)
			r.Slices[s] = sl
			apply(sl, false)
		}
		apply(r.Pod(next, k, false), false)
		write(func(sl *discovery.EndpointSlice) {
			sl.Endpoints = append(sl.Endpoints, r.endpoint(next, k, false, false, false))
		})
		apply(r.Pod(next, k, true), false)
		write(func(sl *discovery.EndpointSlice) {
			sl.Endpoints[len(sl.Endpoints)-1] = r.endpoint(next, k, true, true, false)
		})
		write(func(sl *discovery.EndpointSlice) { sl.Endpoints[idx] = r.endpoint(r.Gen, k, false, true, true) })
		write(func(sl *discovery.EndpointSlice) {
			sl.Endpoints[idx] = sl.Endpoints[len(sl.Endpoints)-1]
			sl.Endpoints = sl.Endpoints[:len(sl.Endpoints)-1]
		})
		apply(r.Pod(r.Gen, k, true), true)
		if pause != nil {
			pause()
		}
	}
	r.Gen = next
}

// Settled reports whether the service's endpoints are the current generation's, all healthy.
func (r *Rollout) Settled(se *collections.ServiceEndpoints) bool {
	if se == nil || len(se.Endpoints) != r.N {
		return false
	}
	prefix := meshNamespace + "/" + r.Name + fmt.Sprintf("-g%d-", r.Gen)
	for _, e := range se.Endpoints {
		if e.Health != collections.Healthy || !strings.HasPrefix(e.Pod, prefix) {
			return false
		}
	}
	return true
}

// finalIn returns a check of whether a CLA set holds the final CLA that decodes each version once:
// the wait checks at each change of the CLAs while the graph works, and decoding a 70 KB CLA at
// every check would take the CPU the graph needs.
func (r *Rollout) finalIn() func(*collections.ResourceSet) bool {
	var checked uint64
	return func(set *collections.ResourceSet) bool {
		if set == nil || set.Shared == nil || set.Shared.Version == checked {
			return false
		}
		checked = set.Shared.Version
		return r.FinalCLA(set.Shared.Body)
	}
}

// FinalCLA reports whether an encoded ClusterLoadAssignment is the rollout's final one: every pod
// of the current generation once, healthy, in the zone of its node, and nothing else.
func (r *Rollout) FinalCLA(body []byte) bool {
	cla := &endpoint.ClusterLoadAssignment{}
	if err := proto.Unmarshal(body, cla); err != nil {
		return false
	}
	zone := map[string]string{} // by pod IP
	for k := 0; k < r.N; k++ {
		zone[r.PodIP(r.Gen, k)] = r.zones[k%len(r.zones)]
	}
	for _, l := range cla.Endpoints {
		for _, e := range l.LbEndpoints {
			addr := e.GetEndpoint().GetAddress().GetSocketAddress().GetAddress()
			if z, ok := zone[addr]; !ok || z != l.GetLocality().GetZone() || e.HealthStatus != core.HealthStatus_HEALTHY {
				return false
			}
			delete(zone, addr)
		}
	}
	return len(zone) == 0
}

// Manifest is the rollout's current state as one file of manifests: the service, the current
// generation's pods and its slices.
func (r *Rollout) Manifest() []byte {
	return Manifest(r.Objects()...)
}

// Manifest renders objects as a multi-document YAML stream.
func Manifest(objs ...any) []byte {
	var b strings.Builder
	for _, o := range objs {
		ro := o.(runtime.Object).DeepCopyObject()
		gvks, _, err := kube.IstioScheme.ObjectKinds(ro)
		if err != nil || len(gvks) == 0 {
			panic(fmt.Sprintf("no kind for %T: %v", o, err))
		}
		ro.GetObjectKind().SetGroupVersionKind(gvks[0])
		y, err := yaml.Marshal(ro)
		if err != nil {
			panic(err)
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return []byte(b.String())
}
