package sources

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

// ownersStep is one change the owners take: files committed (content "" is a file gone), or,
// with expire, the grace's clock read at the step's time.
type ownersStep struct {
	at     time.Duration
	commit map[string]string
	expire bool
	// ups are what the step writes ("Key", or for a Service "Key:port"), dels the keys it deletes.
	ups, dels []string
	// shadowed, after the step: "file: key > winner" for every object a file loses to another.
	shadowed []string
	// files held after the step (nil: not checked).
	files []string
	// next is when expire says the next orphan goes (0: none; only with expire).
	next time.Duration
}

// TestOwners drives the owners alone, as the source's loop does: each step commits files' new
// contents (or their removal) and checks the writes and deletes that come out.
func TestOwners(t *testing.T) {
	svc := func(port int) string { return svcYAML("x", "s", port) }
	both := func(docs ...string) string { return strings.Join(docs, "---\n") }
	for _, tc := range []struct {
		name  string
		grace time.Duration
		steps []ownersStep
	}{
		{"two files claim one object: the last path wins, the other takes over when it goes", DefaultRemoveGrace, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": svc(80), "/m/b.yaml": svc(81)}, ups: []string{"Service/x/s:81"}, shadowed: []string{"/m/a.yaml: Service/x/s > /m/b.yaml"}},
			// The loser's edit changes nothing served.
			{commit: map[string]string{"/m/a.yaml": svc(82)}, shadowed: []string{"/m/a.yaml: Service/x/s > /m/b.yaml"}},
			{commit: map[string]string{"/m/b.yaml": ""}, ups: []string{"Service/x/s:82"}, files: []string{"/m/a.yaml"}},
		}},
		{"a file renamed: nothing written, nothing deleted", DefaultRemoveGrace, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": both(nsYAML("x"), svc(80))}, ups: []string{"Namespace/x", "Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": "", "/m/sub/b.yaml": both(nsYAML("x"), svc(80))}, files: []string{"/m/sub/b.yaml"}},
		}},
		{"an object moves between files: updated, never deleted", DefaultRemoveGrace, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": both(nsYAML("x"), svc(80)), "/m/b.yaml": nsYAML("z")}, ups: []string{"Namespace/x", "Namespace/z", "Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": nsYAML("x"), "/m/b.yaml": both(nsYAML("z"), svc(81))}, ups: []string{"Service/x/s:81"}},
		}},
		{"a file edited: only the documents that changed are written, a dropped object deleted at once", DefaultRemoveGrace, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": both(nsYAML("x"), svc(80))}, ups: []string{"Namespace/x", "Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": both(nsYAML("x"), svc(81))}, ups: []string{"Service/x/s:81"}},
			{commit: map[string]string{"/m/a.yaml": nsYAML("x")}, dels: []string{"Service/x/s"}},
		}},
		{"a file gone: its objects kept for the grace, then deleted", 500 * time.Millisecond, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": svc(80)}, ups: []string{"Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": ""}, files: []string{}},
			{at: 100 * time.Millisecond, expire: true, next: 500 * time.Millisecond},
			{at: 500 * time.Millisecond, expire: true, dels: []string{"Service/x/s"}},
			{at: time.Second, expire: true},
		}},
		{"a file gone and another defining its objects within the grace: updated, never deleted", 500 * time.Millisecond, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": svc(80)}, ups: []string{"Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": ""}},
			{at: 100 * time.Millisecond, commit: map[string]string{"/m/b.yaml": svc(81)}, ups: []string{"Service/x/s:81"}},
			{at: time.Second, expire: true},
		}},
		{"the same file written again within the grace (an editor's save): unchanged, nothing written", 500 * time.Millisecond, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": svc(80)}, ups: []string{"Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": ""}},
			{at: 50 * time.Millisecond, commit: map[string]string{"/m/a.yaml": svc(80)}},
			{at: time.Second, expire: true},
		}},
		{"no grace: a file gone takes its objects at once", -1, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": both(nsYAML("x"), svc(80))}, ups: []string{"Namespace/x", "Service/x/s:80"}},
			{commit: map[string]string{"/m/a.yaml": ""}, dels: []string{"Namespace/x", "Service/x/s"}},
		}},
		{"the winner gone within the grace: the loser's copy is served, not kept", 500 * time.Millisecond, []ownersStep{
			{commit: map[string]string{"/m/a.yaml": svc(80), "/m/b.yaml": svc(81)}, ups: []string{"Service/x/s:81"}, shadowed: []string{"/m/a.yaml: Service/x/s > /m/b.yaml"}},
			{commit: map[string]string{"/m/b.yaml": ""}, ups: []string{"Service/x/s:80"}},
			{at: time.Second, expire: true},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newOwners(tc.grace)
			t0 := time.Unix(1000, 0)
			for i, st := range tc.steps {
				now := t0.Add(st.at)
				var ups, dels []Object
				if st.expire {
					var next time.Time
					dels, next = o.expire(now)
					var want time.Time
					if st.next != 0 {
						want = t0.Add(st.next)
					}
					if !next.Equal(want) {
						t.Errorf("step %d: next expiry %v, want %v", i, next.Sub(t0), st.next)
					}
				} else {
					paths, next := ownersContents(t, st.commit)
					w := o.commit(paths, next, now)
					ups, dels = w.ups, w.dels
				}
				if got := describeObjects(ups); !slices.Equal(got, sorted(st.ups)) {
					t.Errorf("step %d: writes %v, want %v", i, got, st.ups)
				}
				if got := objectKeys(dels); !slices.Equal(got, sorted(st.dels)) {
					t.Errorf("step %d: deletes %v, want %v", i, got, st.dels)
				}
				if st.expire {
					continue
				}
				var shadowed []string
				for _, p := range o.paths() {
					for k, by := range o.files[p].shadowed {
						shadowed = append(shadowed, p+": "+k+" > "+by)
					}
				}
				if !slices.Equal(sorted(shadowed), sorted(st.shadowed)) {
					t.Errorf("step %d: shadowed %v, want %v", i, shadowed, st.shadowed)
				}
				if st.files != nil && !slices.Equal(o.paths(), st.files) {
					t.Errorf("step %d: files %v, want %v", i, o.paths(), st.files)
				}
			}
		})
	}
}

// TestOwnersCommitReportsChangedFiles: a commit names every file whose problems may change:
// those committed, and those that lose (or win back) an object they define.
func TestOwnersCommitReportsChangedFiles(t *testing.T) {
	o := newOwners(DefaultRemoveGrace)
	paths, next := ownersContents(t, map[string]string{"/m/a.yaml": svcYAML("x", "s", 80)})
	o.commit(paths, next, time.Now())
	paths, next = ownersContents(t, map[string]string{"/m/b.yaml": svcYAML("x", "s", 81)})
	w := o.commit(paths, next, time.Now())
	if got := sorted(slices.Compact(sorted(w.changed))); !slices.Equal(got, []string{"/m/a.yaml", "/m/b.yaml"}) {
		t.Errorf("changed %v: a.yaml lost its Service and must be told", got)
	}
	paths, next = ownersContents(t, map[string]string{"/m/b.yaml": ""})
	w = o.commit(paths, next, time.Now())
	if !slices.Equal(w.gone, []string{"/m/b.yaml"}) || !slices.Contains(w.changed, "/m/a.yaml") {
		t.Errorf("gone %v, changed %v", w.gone, w.changed)
	}
}

// TestOwnersProblemsKeepObjects: a file whose content is not applied keeps its objects; the
// reader is told the content it failed on (not read again while it stays), and an unchanged
// read clears a problem that was not with the content.
func TestOwnersProblemsKeepObjects(t *testing.T) {
	problemInvalid := collections.Problem{Reason: ReasonInvalidManifest}
	o := newOwners(DefaultRemoveGrace)
	paths, next := ownersContents(t, map[string]string{"/m/a.yaml": svcYAML("x", "s", 80)})
	o.commit(paths, next, time.Now())
	applied := o.held("/m/a.yaml").hash
	if applied == 0 || o.held("/m/a.yaml").cache == nil || o.held("/m/b.yaml").known {
		t.Fatalf("held %+v, %+v", o.held("/m/a.yaml"), o.held("/m/b.yaml"))
	}
	o.setProblem("/m/a.yaml", &problemInvalid, 42)
	if h := o.held("/m/a.yaml"); h.hash != 42 || len(o.files["/m/a.yaml"].objects) != 1 {
		t.Errorf("after an invalid edit: held %+v, objects %v", h, o.files["/m/a.yaml"].objects)
	}
	if o.unchanged("/m/a.yaml", 42) {
		t.Error("the invalid content read again cleared its problem")
	}
	o.setProblem("/m/a.yaml", &problemInvalid, 0) // unreadable: no content
	if !o.unchanged("/m/a.yaml", applied) || o.files["/m/a.yaml"].problem != nil || o.held("/m/a.yaml").hash != applied {
		t.Errorf("the applied content read again did not clear the problem: %+v", o.files["/m/a.yaml"])
	}
	o.setWaiting("/m/new.yaml")
	if !o.has("/m/new.yaml") || !o.unchanged("/m/new.yaml", 7) || o.files["/m/new.yaml"].waiting {
		t.Errorf("a writer's file: %+v", o.files["/m/new.yaml"])
	}
	if got := sorted(o.under("/m")); !slices.Equal(got, []string{"/m/a.yaml", "/m/new.yaml"}) {
		t.Errorf("under /m: %v", got)
	}
	if got := o.in("/"); len(got) != 0 {
		t.Errorf("in /: %v", got)
	}
}

// ownersContents decodes files' contents ("": gone) into a commit's paths (sorted) and contents.
func ownersContents(t *testing.T, files map[string]string) ([]string, map[string]fileContent) {
	t.Helper()
	next := map[string]fileContent{}
	var paths []string
	for p, data := range files {
		paths = append(paths, p)
		if data == "" {
			continue
		}
		d, err := Decode([]byte(data), nil)
		if err != nil {
			t.Fatal(err)
		}
		next[p] = fileContent{decoded: &d, hash: uint64(len(data))}
	}
	slices.Sort(paths)
	return paths, next
}

// describeObjects names objects by key, and a Service by its port too, sorted.
func describeObjects(objs []Object) []string {
	out := []string{}
	for _, o := range objs {
		if s, ok := o.Obj.(*corev1.Service); ok {
			out = append(out, fmt.Sprintf("%s:%d", o.Key, s.Spec.Ports[0].Port))
			continue
		}
		out = append(out, o.Key)
	}
	return sorted(out)
}

func objectKeys(objs []Object) []string {
	out := []string{}
	for _, o := range objs {
		out = append(out, o.Key)
	}
	return sorted(out)
}

func sorted(s []string) []string {
	out := append([]string{}, s...)
	slices.Sort(out)
	return out
}
