package sources

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"istio.io/istio/pkg/kube/krt"
	"istio.io/istio/pkg/test"

	"github.com/krteds/krteds/collections"
)

// TestProblemSet drives the problem set alone: a file marked is written as describe says it
// stands (deleted when it has none), once; replace leaves exactly what is wanted.
func TestProblemSet(t *testing.T) {
	c := krt.NewStaticCollection[collections.ObjectProblems](nil, nil, krt.NewOptionsBuilder(test.NewStop(t), "", nil).WithName("problems")...)
	ps := newProblemSet(c)
	broken := map[string]bool{"a.yaml": true, "b.yaml": true}
	describe := func(p string) (string, *collections.ObjectProblems) {
		if !broken[p] {
			return p, nil
		}
		return p, fileProblems(p, &fileState{problem: &collections.Problem{Reason: ReasonInvalidManifest}}, nil)
	}
	held := func() []string {
		var out []string
		for _, op := range c.List() {
			out = append(out, op.ResourceName())
		}
		return sorted(out)
	}
	for i, step := range []struct {
		mark   []string
		fixed  []string
		writes int
		want   []string
	}{
		{mark: []string{"a.yaml", "b.yaml", "c.yaml"}, writes: 3, want: []string{"ManifestFile/a.yaml", "ManifestFile/b.yaml"}},
		{writes: 0, want: []string{"ManifestFile/a.yaml", "ManifestFile/b.yaml"}},
		{mark: []string{"a.yaml", "a.yaml"}, fixed: []string{"a.yaml"}, writes: 1, want: []string{"ManifestFile/b.yaml"}},
	} {
		for _, f := range step.fixed {
			delete(broken, f)
		}
		ps.mark(step.mark...)
		ups := ps.pending(describe)
		if len(ups) != step.writes {
			t.Errorf("step %d: %d updates, want %d: %v", i, len(ups), step.writes, ups)
		}
		ps.write(ups)
		if got := held(); !slices.Equal(got, step.want) {
			t.Errorf("step %d: the collection holds %v, want %v", i, got, step.want)
		}
	}
	ps.mark("b.yaml")
	ps.replace(map[string]collections.ObjectProblems{"ManifestFile/current": *linkProblems("current", &collections.Problem{Reason: ReasonSymlinkBroken})})
	if got := held(); !slices.Equal(got, []string{"ManifestFile/current"}) || len(ps.dirty) != 0 {
		t.Errorf("after replace: %v, marks %v", got, ps.dirty)
	}
}

// TestFileProblems: what a file's state says of it.
func TestFileProblems(t *testing.T) {
	invalid := &collections.Problem{Reason: ReasonInvalidManifest, Detail: "document 0: bad"}
	rel := func(p string) string { return filepath.Base(p) }
	for _, tc := range []struct {
		name string
		fs   *fileState
		want []string // "reason: detail" of each problem
	}{
		{"no file", nil, nil},
		{"applied, alone", &fileState{hash: 1}, nil},
		{"invalid from the start", &fileState{problem: invalid, failHash: 2}, []string{"invalid_manifest: document 0: bad"}},
		{"invalid after an applied content: kept", &fileState{hash: 1, problem: invalid, failHash: 2},
			[]string{"invalid_manifest: document 0: bad; the file's previous objects are kept"}},
		{"an object another file wins", &fileState{hash: 1, shadowed: map[string]string{"Service/x/s": "/m/z.yaml"}},
			[]string{"duplicate_object: Service/x/s is also defined in z.yaml, which wins"}},
		{"an object twice in the file", &fileState{hash: 1, dups: []string{"Namespace/a"}},
			[]string{"duplicate_object: Namespace/a is defined twice; the later document wins"}},
		{"invalid and shadowed: both", &fileState{hash: 1, problem: invalid, shadowed: map[string]string{"Namespace/a": "/m/z.yaml"}},
			[]string{"invalid_manifest: document 0: bad; the file's previous objects are kept", "duplicate_object: Namespace/a is also defined in z.yaml, which wins"}},
		{"many: the first five, and how many more", &fileState{hash: 1, dups: []string{"N/1", "N/2", "N/3", "N/4", "N/5", "N/6", "N/7"}},
			[]string{"duplicate_object: N/1 is defined twice; the later document wins; N/2 is defined twice; the later document wins; " +
				"N/3 is defined twice; the later document wins; N/4 is defined twice; the later document wins; N/5 is defined twice; the later document wins; and 2 more"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			op := fileProblems("sub/m.yaml", tc.fs, rel)
			var got []string
			if op != nil {
				if op.Kind != KindManifestFile || op.Object != "sub/m.yaml" {
					t.Errorf("named %s/%s", op.Kind, op.Object)
				}
				for _, p := range op.Problems {
					if p.Kind != KindManifestFile || p.Object != "sub/m.yaml" {
						t.Errorf("problem named %s/%s", p.Kind, p.Object)
					}
					got = append(got, p.Reason+": "+p.Detail)
				}
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
	if invalid.Detail != "document 0: bad" {
		t.Error("the file's problem was changed in place")
	}
}

func TestLinkProblems(t *testing.T) {
	a := &collections.Problem{Reason: ReasonSymlinkBroken, Detail: "x"}
	b := &collections.Problem{Reason: ReasonSymlinkBroken, Detail: "y"}
	if linkProblems("current", nil) != nil {
		t.Error("a link that leads somewhere has problems")
	}
	if op := linkProblems("current", a); op.ResourceName() != "ManifestFile/current" || op.Problems[0].Object != "current" || a.Object != "" {
		t.Errorf("%+v (the link's problem %+v)", op, a)
	}
	for _, tc := range []struct {
		a, b *collections.Problem
		same bool
	}{{nil, nil, true}, {a, nil, false}, {nil, a, false}, {a, &collections.Problem{Reason: ReasonSymlinkBroken, Detail: "x"}, true}, {a, b, false}} {
		if sameProblem(tc.a, tc.b) != tc.same {
			t.Errorf("sameProblem(%v, %v) = %v", tc.a, tc.b, !tc.same)
		}
	}
}
