// Package transforms holds krteds' derivations, one package per thing they produce, each
// importing only those before it: registry (what the clusters hold: services, workloads, slice
// endpoints, ServiceEntries and WorkloadEntries), policy (what applies to whom: DestinationRules,
// Sidecars, PeerAuthentications, proxies, their classes and views), eds (the CLAs: plans,
// locality, networks, mTLS metadata, encoding, LEDS) and cds (clusters, and the listeners and
// routes of proxyless clients). Each derivation is a pure function of its input and of what it
// Fetches from other collections, built by a constructor that closes over its dependencies;
// nothing here touches the network, the clock or a global. This package is their kit: the
// transform types (Single, Many, Checked), the problems an object has, and resource naming.
package transforms

import (
	"cmp"
	"strings"
	"time"

	"istio.io/istio/pkg/config"
	"istio.io/istio/pkg/config/validation"
	"istio.io/istio/pkg/kube/controllers"
	"istio.io/istio/pkg/kube/krt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
)

// A derivation is a pure function of its input and of what it Fetches, built by a constructor
// that closes over the collections it reads. The constructor lists them in Reads (an index is
// listed as the collection it indexes), so that the graph can be drawn without asking krt to
// dump every object; a test holds Reads to what krt records.

// Single derives at most one output from each input.
type Single[I, O any] struct {
	Fn    krt.TransformationSingle[I, O]
	Reads []any
}

// Many derives any number of outputs from each input.
type Many[I, O any] struct {
	Fn    krt.TransformationMulti[I, O]
	Reads []any
}

// Checked derives at most one output from each input object, and says what it found wrong with
// the object (nil: nothing).
type Checked[I controllers.Object, O any] struct {
	Fn    krt.TransformationSingleStatus[I, collections.ObjectProblems, O]
	Reads []any
}

// Problems collects what a transform finds wrong with one object.
type Problems struct {
	Kind, Object string
	list         []collections.Problem
}

// Validated starts the problems of an Istio object and runs istiod's validation of it
// (pkg/config/validation, used as is): ok is false, the rejection recorded as reason, when the
// validation rejects the object.
func Validated(kind string, m metav1.ObjectMeta, spec config.Spec, validate validation.ValidateFunc, reason string) (pr *Problems, ok bool) {
	pr = &Problems{Kind: kind, Object: m.Namespace + "/" + m.Name}
	if _, err := validate(istioConfig(m, spec)); err != nil {
		pr.Add(reason, err.Error())
		return pr, false
	}
	return pr, true
}

// Add records one problem of the object.
func (p *Problems) Add(reason, detail string) {
	p.list = append(p.list, collections.Problem{Kind: p.Kind, Object: p.Object, Reason: reason, Detail: detail})
}

// Result is the transform's problems, nil when there are none.
func (p *Problems) Result() *collections.ObjectProblems {
	if len(p.list) == 0 {
		return nil
	}
	return &collections.ObjectProblems{Kind: p.Kind, Object: p.Object, Problems: p.list}
}

// Deref is what FetchOne found in a collection of pointers (nil when it found nothing).
func Deref[T any](p **T) *T {
	if p == nil {
		return nil
	}
	return *p
}

// istioConfig wraps an Istio object's metadata and spec as istiod's validation takes them.
func istioConfig(m metav1.ObjectMeta, spec config.Spec) config.Config {
	return config.Config{Meta: config.Meta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}, Spec: spec}
}

// CompareCreation orders objects by creation time, then name, then namespace (istiod's
// configCompareByCreationTime).
func CompareCreation(at, bt time.Time, an, bn, ans, bns string) int {
	return cmp.Or(at.Compare(bt), strings.Compare(an, bn), strings.Compare(ans, bns))
}

// SubsetMatch reports whether the endpoint carries every subset label (istiod's
// labels.Instance.SubsetOf over the augmented labels, read without building them).
func SubsetMatch(label func(string) (string, bool), subset map[string]string) bool {
	for k, want := range subset {
		if v, ok := label(k); !ok || v != want {
			return false
		}
	}
	return true
}
