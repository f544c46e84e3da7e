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

// problems collects what a transform finds wrong with one object.
type problems struct {
	kind, object string
	list         []collections.Problem
}

// validated starts the problems of an Istio object and runs istiod's validation of it
// (pkg/config/validation, used as is): ok is false, the rejection recorded as reason, when the
// validation rejects the object.
func validated(kind string, m metav1.ObjectMeta, spec config.Spec, validate validation.ValidateFunc, reason string) (pr *problems, ok bool) {
	pr = &problems{kind: kind, object: m.Namespace + "/" + m.Name}
	if _, err := validate(istioConfig(m, spec)); err != nil {
		pr.add(reason, err.Error())
		return pr, false
	}
	return pr, true
}

func (p *problems) add(reason, detail string) {
	p.list = append(p.list, collections.Problem{Kind: p.kind, Object: p.object, Reason: reason, Detail: detail})
}

// result is the transform's problems, nil when there are none.
func (p *problems) result() *collections.ObjectProblems {
	if len(p.list) == 0 {
		return nil
	}
	return &collections.ObjectProblems{Kind: p.kind, Object: p.object, Problems: p.list}
}

// deref is what FetchOne found in a collection of pointers (nil when it found nothing).
func deref[T any](p **T) *T {
	if p == nil {
		return nil
	}
	return *p
}

// istioConfig wraps an Istio object's metadata and spec as istiod's validation takes them.
func istioConfig(m metav1.ObjectMeta, spec config.Spec) config.Config {
	return config.Config{Meta: config.Meta{Name: m.Name, Namespace: m.Namespace, Labels: m.Labels, Annotations: m.Annotations}, Spec: spec}
}

// compareCreation orders objects by creation time, then name, then namespace (istiod's
// configCompareByCreationTime).
func compareCreation(at, bt time.Time, an, bn, ans, bns string) int {
	return cmp.Or(at.Compare(bt), strings.Compare(an, bn), strings.Compare(ans, bns))
}

// subsetMatch reports whether the endpoint carries every subset label (istiod's
// labels.Instance.SubsetOf over the augmented labels, read without building them).
func subsetMatch(label func(string) (string, bool), subset map[string]string) bool {
	for k, want := range subset {
		if v, ok := label(k); !ok || v != want {
			return false
		}
	}
	return true
}
