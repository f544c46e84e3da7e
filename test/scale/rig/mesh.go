package rig

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/krteds/krteds/test/fixtures"
)

// ZoneOf is the region and zone of node n.
func (sz Size) ZoneOf(n int) (string, string) {
	z := n % sz.Zones
	r := z % sz.Regions
	return fmt.Sprintf("region-%d", r), fmt.Sprintf("region-%d-zone-%d", r, z)
}

func NodeName(n int) string { return fmt.Sprintf("node-%04d", n) }

// DoomedNode is the node whose kubelet (a kwok of its own) the rig kills.
const DoomedNode = "node-0001"

// CreateNodes creates the fake nodes kwok manages, labelled with their zone.
func (r *Rig) CreateNodes() {
	r.T.Helper()
	ctx := context.Background()
	for n := 0; n < r.Size.Nodes; n++ {
		region, zone := r.Size.ZoneOf(n)
		kubelet := "fake"
		if NodeName(n) == DoomedNode {
			kubelet = "doomed"
		}
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: NodeName(n),
			Annotations: map[string]string{kwokNode: kubelet, "node.alpha.kubernetes.io/ttl": "0"},
			Labels:      map[string]string{"topology.kubernetes.io/region": region, "topology.kubernetes.io/zone": zone, "kubernetes.io/hostname": NodeName(n), "type": "kwok"}}}
		if _, err := r.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			r.T.Fatal(err)
		}
	}
	APIServer.Await(r.T, 2*time.Minute, "every node ready", func() (bool, string) {
		nodes, err := r.Admin.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err.Error()
		}
		ready := 0
		for _, n := range nodes.Items {
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue {
					ready++
				}
			}
		}
		return ready == r.Size.Nodes, fmt.Sprintf("%d of %d ready", ready, r.Size.Nodes)
	})
}

// APIServer polls what the rig reads from the API server (LIST, GET) and from its audit log: they
// signal nothing, and the tick is 100 ms so that the probes load little the machine under
// measurement.
var APIServer = fixtures.PollingEvery(100*time.Millisecond, "the API server is read by LIST, GET and its audit log, which signal nothing; 100 ms loads the machine under measurement little")

var evictAfter int64 = 2

// deployment is a Deployment of pods answering a Service of the same name on port 80.
func deployment(name string, replicas int32, version string) *appsv1.Deployment {
	zero, surge := intstr.FromInt32(0), intstr.FromString("25%")
	labels := map[string]string{"app": name}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: appsv1.DeploymentSpec{
			Replicas: &replicas,
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
				RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: &zero, MaxSurge: &surge}},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"app": name, "version": version}},
				Spec: corev1.PodSpec{
					Containers: []corev1.Container{{Name: "app", Image: "app:" + version,
						Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}}},
					// kwok's pods never run a container: stopping takes no time.
					TerminationGracePeriodSeconds: new(int64),
					// Evicted 2 s after their node goes not ready or unreachable (the default is 300 s).
					Tolerations: []corev1.Toleration{
						{Key: corev1.TaintNodeNotReady, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &evictAfter},
						{Key: corev1.TaintNodeUnreachable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: &evictAfter},
					},
				},
			},
		},
	}
}

func service(name string) *corev1.Service {
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace},
		Spec: corev1.ServiceSpec{Selector: map[string]string{"app": name},
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
}

// CreateMesh creates the Namespace and the services, each with its Deployment, and waits until
// the EndpointSlices hold every pod ready.
func (r *Rig) CreateMesh(extra map[string]int32) (pods int) {
	r.T.Helper()
	ctx := context.Background()
	if _, err := r.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		r.T.Fatal(err)
	}
	want := map[string]int32{}
	for i := 0; i < r.Size.Services; i++ {
		want[ServiceName(i)] = int32(r.Size.PodsPerService)
	}
	for name, n := range extra {
		want[name] = n
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(want))
	sem := make(chan struct{}, 16)
	for name, n := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := r.Admin.CoreV1().Services(Namespace).Create(ctx, service(name), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				errs <- err
				return
			}
			if _, err := r.Admin.AppsV1().Deployments(Namespace).Create(ctx, deployment(name, n, "v1"), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		r.T.Fatal(err)
	}
	total := 0
	for _, n := range want {
		total += int(n)
	}
	return total
}

// PodsOf lists a service's running pods, by name, with their IPs.
func (r *Rig) PodsOf(svc string) []corev1.Pod {
	r.T.Helper()
	pods, err := r.Admin.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + svc})
	if err != nil {
		r.T.Fatal(err)
	}
	var out []corev1.Pod
	for _, p := range pods.Items {
		if p.Status.PodIP != "" && p.DeletionTimestamp == nil && strings.HasPrefix(p.Name, svc) {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
