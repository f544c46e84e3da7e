package bench

import (
	"fmt"
	"os"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The churn's large Deployments: a few services grown to many endpoints ("grow"), then rolled a
// Pod at a time ("roll"), among the many small ones the other kinds change.

// rollServices is how many services are grown and rolled (KRTEDS_CHURN_ROLL_SERVICES, default
// 3, at most 8); rollEndpoints the endpoints each has (KRTEDS_CHURN_ROLL_ENDPOINTS, default 200,
// at most 4 096). The server process reads them from the environment it inherits.
func rollSizes() (services, endpoints int) {
	services, endpoints = 3, 200
	if n, err := strconv.Atoi(os.Getenv("KRTEDS_CHURN_ROLL_SERVICES")); err == nil && n > 0 {
		services = min(n, 8)
	}
	if n, err := strconv.Atoi(os.Getenv("KRTEDS_CHURN_ROLL_ENDPOINTS")); err == nil && n > 0 {
		endpoints = min(n, 4096)
	}
	return services, endpoints
}

// rolled lists the services grown and rolled: the first ones the flips pick (shared by every
// proxy's class: none is PreferClose), which the other kinds then leave alone.
func rolled(size Size) []int {
	n, _ := rollSizes()
	out := make([]int, 0, n)
	for k := 0; k < n; k++ {
		out = append(out, flipService(size, k))
	}
	return out
}

// bigPodIP is the address of Pod number j of the rank-th rolled service: apart from the mesh's
// (10.1–10.16) and unique for j < 2^20.
func bigPodIP(rank, j int) string {
	n := rank<<20 | j
	return fmt.Sprintf("10.%d.%d.%d", 128+(n>>16&127), n>>8&255, n&255)
}

// changer makes the churn's changes to the mesh's objects, in the order Kubernetes writes them,
// and keeps what each service's slices are now. Not safe for concurrent use.
type changer struct {
	size Size
	// slices are each service's slices now, by service name.
	slices map[string][]*discovery.EndpointSlice
	// replaced counts the Pods replaced, scaled the services scaled up now, rolls the Pods
	// rolled, by service.
	replaced, rolls map[int]int
	scaled          map[int]bool
}

func newChanger(m *Mesh) *changer {
	c := &changer{size: m.Size, slices: map[string][]*discovery.EndpointSlice{}, replaced: map[int]int{}, rolls: map[int]int{}, scaled: map[int]bool{}}
	for _, s := range m.Slices {
		name := s.Labels["kubernetes.io/service-name"]
		c.slices[name] = append(c.slices[name], s)
	}
	return c
}

// change makes one change of a kind to service i: the objects written before its slices (new
// Pods), the slices it changes or adds, and the objects deleted after (the Pods the slices no
// longer name). Kinds: the first endpoint's readiness ("ready", the
// default); its Pod replaced by one with a new address, as a rollout does ("replace"); one
// endpoint more, then one less again, as a Deployment scaled up and down ("scale"); the service
// grown to the rolled services' size, once ("grow"); the next of its Pods, in turn, replaced by
// one with a new address ("roll").
func (c *changer) change(i int, kind string) (before []any, ss []*discovery.EndpointSlice, after []any, err error) {
	name := ServiceName(i)
	cur := c.slices[name]
	if len(cur) == 0 {
		return nil, nil, nil, fmt.Errorf("no service %d", i)
	}
	all := slices.Clone(cur)
	all[0] = all[0].DeepCopy()
	s := all[0]
	changed := []int{0} // the slices written, by index in all
	switch kind {
	case "replace":
		old := s.Endpoints[0].TargetRef.Name
		gen := c.replaced[i]
		c.replaced[i] = gen + 1
		pod := Pod(i, firstReplacement+gen%replacements, *s.Endpoints[0].NodeName)
		setPod(&s.Endpoints[0], pod)
		before = append(before, pod)
		after = append(after, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: old}})
	case "scale":
		extra := len(s.Endpoints) - 1
		if !c.scaled[i] {
			e := s.Endpoints[extra]
			pod := Pod(i, len(s.Endpoints), *e.NodeName)
			setPod(&e, pod)
			s.Endpoints = append(s.Endpoints, e)
			before = append(before, pod)
		} else {
			after = append(after, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: s.Endpoints[extra].TargetRef.Name}})
			s.Endpoints = s.Endpoints[:extra]
		}
		c.scaled[i] = !c.scaled[i]
	case "grow":
		rank := slices.Index(rolled(c.size), i)
		_, want := rollSizes()
		if rank < 0 {
			return nil, nil, nil, fmt.Errorf("service %d is not one the churn rolls", i)
		}
		if n := endpointsOf(all); n >= want {
			return nil, nil, nil, fmt.Errorf("service %d has grown already (%d endpoints)", i, n)
		}
		all, before = c.grow(i, rank, all, want)
		changed = changed[:0]
		for k := range all {
			changed = append(changed, k)
		}
	case "roll":
		rank := slices.Index(rolled(c.size), i)
		n := endpointsOf(all)
		if rank < 0 || n <= c.size.EndpointsPerService {
			return nil, nil, nil, fmt.Errorf("service %d is not grown: grow it before rolling it", i)
		}
		// Pod k of the rolled service, in turn; its replacement is numbered past every Pod the
		// service had, a new address each time.
		gen := c.rolls[i]
		c.rolls[i] = gen + 1
		k := gen % n / sliceSize
		all[k] = cur[k].DeepCopy()
		changed[0] = k
		e := &all[k].Endpoints[gen%n%sliceSize]
		old := e.TargetRef.Name
		pod := Pod(i, n+gen, *e.NodeName)
		ip := bigPodIP(rank, n+gen%(1<<20-n))
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		setPod(e, pod)
		before = append(before, pod)
		after = append(after, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: pod.Namespace, Name: old}})
	default:
		ready := !*s.Endpoints[0].Conditions.Ready
		s.Endpoints[0].Conditions.Ready = &ready
	}
	c.slices[name] = all
	for _, k := range changed {
		ss = append(ss, all[k])
	}
	return before, ss, after, nil
}

// grow adds endpoints to a rolled service's slices (the first a copy already), sliceSize to a
// slice, up to want: new Pods placed as the mesh's are, at the rolled services' addresses.
func (c *changer) grow(i, rank int, ss []*discovery.EndpointSlice, want int) ([]*discovery.EndpointSlice, []any) {
	var pods []any
	for j := endpointsOf(ss); j < want; j++ {
		last := ss[len(ss)-1]
		if len(last.Endpoints) == sliceSize {
			last = newSlice(i, len(ss))
			ss = append(ss, last)
		}
		node, zone := c.size.placement(i, j)
		pod := Pod(i, j, node)
		ip := bigPodIP(rank, j)
		pod.Status.PodIP, pod.Status.PodIPs = ip, []corev1.PodIP{{IP: ip}}
		last.Endpoints = append(last.Endpoints, endpointOf(pod, zone))
		pods = append(pods, pod)
	}
	return ss, pods
}

func endpointsOf(ss []*discovery.EndpointSlice) int {
	n := 0
	for _, s := range ss {
		n += len(s.Endpoints)
	}
	return n
}
