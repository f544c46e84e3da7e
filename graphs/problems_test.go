package graphs

import (
	"fmt"
	"testing"
	"time"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/test/fixtures"
	"github.com/krteds/krteds/transforms/cds"
)

// Resource sets that kept a resource out are listed by the resource-problems collection, from
// any of the collections it reads, and leave it when the set is fixed or removed.
func TestResourceProblemsFollowTheSets(t *testing.T) {
	stop := test.NewStop(t)
	opts := krt.NewOptionsBuilder(stop, "", nil)
	set := func(key string, bad bool) collections.ResourceSet {
		s := collections.ResourceSet{Key: key, Name: key, TypeURL: "t"}
		if bad {
			s.Problems = []collections.Problem{{Kind: "Service", Object: key, Reason: collections.ReasonMarshalFailed}}
		}
		return s
	}
	a := krt.NewStaticCollection(nil, []collections.ResourceSet{set("a1", false), set("a2", true)}, opts.WithName("a")...)
	b := krt.NewStaticCollection(nil, []collections.ResourceSet{set("b1", false)}, opts.WithName("b")...)
	d := newDescription(opts)
	probs := DeriveFromNothing(d, "problems", cds.ResourceProblems(a, b))
	w := fixtures.WakeOn(t, fixtures.NewWaker(), probs)
	expect := func(want ...string) {
		t.Helper()
		w.Await(t, 10*time.Second, fmt.Sprint("problems of ", want), func() (bool, string) {
			got := probs.List()
			if len(got) != len(want) {
				return false, fmt.Sprint(got)
			}
			for _, k := range want {
				if probs.GetKey("t/"+k) == nil {
					return false, fmt.Sprint(got)
				}
			}
			return true, ""
		})
	}
	expect("a2")
	b.UpdateObject(set("b1", true))
	expect("a2", "b1")
	a.UpdateObject(set("a2", false))
	expect("b1")
	b.DeleteObject("b1")
	expect()
}
