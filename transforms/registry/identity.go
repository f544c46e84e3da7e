package registry

import (
	"regexp"
	"strings"

	"istio.io/istio/pkg/spiffe"

	"github.com/krteds/krteds/collections"
)

// Who a workload is: its SPIFFE identity (remembered per service account) and its workload and
// canonical names, as istiod derives them from a Pod.

// Identities remembers the interned workload identities the transforms derive: every recompute
// of a slice derives the identity of each of its Pods (a rollout recomputes a slice at every
// event of any of its Pods), and a mesh has few distinct ones. The graph owns one for all its
// clusters (the key holds the trust domain and namespace); /debug/memz shows it.
type Identities = collections.Memo[[3]string, string]

// NewIdentities is an empty memo of identities, bounded to 65 536 (emptied when full).
func NewIdentities() *Identities {
	return collections.NewMemo[[3]string, string]("workload identities", 1<<16, 0, nil)
}

// identity is the workload identity of a service account, remembered in ids.
func identity(ids *Identities, trustDomain, namespace, serviceAccount string) string {
	if ids == nil {
		return internedIdentity(trustDomain, namespace, serviceAccount)
	}
	id, _ := ids.Get([3]string{trustDomain, namespace, serviceAccount}, func() (string, bool) {
		return internedIdentity(trustDomain, namespace, serviceAccount), true
	})
	return id
}

// SpiffeIdentity is spiffe://<trust-domain>/ns/<ns>/sa/<sa>; "" without a service account.
func SpiffeIdentity(trustDomain, namespace, serviceAccount string) string {
	if serviceAccount == "" {
		serviceAccount = "default"
	}
	return spiffe.MustGenSpiffeURIForTrustDomain(trustDomain, namespace, serviceAccount)
}

// internedIdentity is SpiffeIdentity, interned: a mesh has few distinct identities and every
// workload holds one.
func internedIdentity(trustDomain, namespace, serviceAccount string) string {
	return collections.Intern(SpiffeIdentity(trustDomain, namespace, serviceAccount))
}

var cronJobName = regexp.MustCompile(`(.+)-\d{8,10}$`)

// WorkloadName follows istiod's GetWorkloadMetaFromPod: the service.istio.io/workload-name label;
// else, for a pod with a generateName and a controller owner, the owner's name with the
// Deployment (pod-template-hash) or Argo Rollout suffix removed, the OpenShift deploymentconfig
// label, or the CronJob name of a "<cronjob>-<8..10 digits>" Job; else the pod name.
func WorkloadName(pod *collections.Pod) string {
	if v, ok := pod.Labels.Get(collections.LabelWorkloadName); ok {
		return v
	}
	ref := pod.Controller
	if !pod.Generated || ref == nil || ref.Kind == "" {
		return pod.Name()
	}
	hash := pod.Labels.Value(collections.LabelPodTemplateHash)
	rollouts := pod.Labels.Value(collections.LabelRolloutsHash)
	switch {
	case ref.Kind == "ReplicaSet" && hash != "" && strings.HasSuffix(ref.Name, hash):
		return strings.TrimSuffix(ref.Name, "-"+hash)
	case ref.Kind == "ReplicaSet" && rollouts != "" && strings.HasSuffix(ref.Name, rollouts):
		return strings.TrimSuffix(ref.Name, "-"+rollouts)
	case ref.Kind == "ReplicationController" && pod.Labels.Value(collections.LabelDeploymentConfig) != "":
		return pod.Labels.Value(collections.LabelDeploymentConfig)
	case ref.Kind == "Job":
		if m := cronJobName.FindStringSubmatch(ref.Name); len(m) == 2 {
			return m[1]
		}
	}
	return ref.Name
}

// The labels istiod's canonical name and revision come from, in order (kubelabels).
var (
	canonicalNameLabels     = []string{collections.LabelCanonicalName, collections.LabelAppName, collections.LabelApp}
	canonicalRevisionLabels = []string{collections.LabelCanonicalRevision, collections.LabelAppVersion, collections.LabelVersion}
)

// canonicalService is istiod's canonical name and revision of a workload (kubelabels.CanonicalService,
// as AppendLbEndpointMetadata calls it): the first present of service.istio.io/canonical-name,
// app.kubernetes.io/name, app, else the workload name; of service.istio.io/canonical-revision,
// app.kubernetes.io/version, version, else "latest", which is written as "". A label present
// with an empty value is taken, as istiod takes it. It reads the labels through get rather than
// calling kubelabels with a map: every slice recompute derives every one of its Pods' workloads,
// and a map per Pod is what a rollout would pay for at each event (TestCanonicalServiceIsIstiods
// holds it to the library).
func canonicalService(get func(string) (string, bool), workloadName string) (name, revision string) {
	name, revision = workloadName, ""
	for _, k := range canonicalNameLabels {
		if v, ok := get(k); ok {
			name = v
			break
		}
	}
	for _, k := range canonicalRevisionLabels {
		if v, ok := get(k); ok {
			revision = v
			break
		}
	}
	if revision == "latest" {
		revision = ""
	}
	return name, revision
}
