package sources

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/krteds/krteds/collections"
)

// fakeWatcher records the folders watched; adding one of fail fails.
type fakeWatcher struct {
	watched map[string]bool
	fail    map[string]bool
}

func newFakeWatcher() *fakeWatcher {
	return &fakeWatcher{watched: map[string]bool{}, fail: map[string]bool{}}
}

func (w *fakeWatcher) add(dir string) error {
	if w.fail[dir] {
		return errors.New("no more watches")
	}
	w.watched[dir] = true
	return nil
}
func (w *fakeWatcher) remove(dir string)         { delete(w.watched, dir) }
func (w *fakeWatcher) events() <-chan watchEvent { return nil }
func (w *fakeWatcher) close() error              { return nil }

// fileSet is the files a source holds, as the tree asks of them.
type fileSet map[string]bool

func (f fileSet) has(p string) bool { return f[p] }
func (f fileSet) under(p string) []string {
	var out []string
	for k := range f {
		if within(k, p) {
			out = append(out, k)
		}
	}
	return out
}
func (f fileSet) in(dir string) []string {
	var out []string
	for k := range f {
		if filepath.Dir(k) == dir {
			out = append(out, k)
		}
	}
	return out
}

// layout makes entries under dir: "a/b.yaml" a file, "a/" a folder, "l.yaml -> target" a
// symlink (target relative to the link, or absolute).
func layout(t *testing.T, dir string, entries ...string) {
	t.Helper()
	for _, e := range entries {
		p := filepath.Join(dir, e)
		switch {
		case strings.Contains(e, " -> "):
			link, target, _ := strings.Cut(e, " -> ")
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, link)), 0o755); err != nil {
				t.Fatal(err)
			}
			mustSymlink(t, target, filepath.Join(dir, link))
		case strings.HasSuffix(e, "/"):
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
		default:
			writeFile(t, p, nsYAML("a"))
		}
	}
}

// rels makes paths relative to dir, sorted and without repeats ("." for dir).
func rels(dir string, paths []string) []string {
	out := []string{}
	for _, p := range paths {
		r, err := filepath.Rel(dir, p)
		if err != nil {
			r = p
		}
		out = append(out, r)
	}
	return slices.Compact(sorted(out))
}

// TestTreeExamine drives the tree alone over a folder: a first walk, then, after the folder
// changes, an examination of the paths its events name, against the files the source then holds.
func TestTreeExamine(t *testing.T) {
	for _, tc := range []struct {
		name   string
		before []string // the folder at the first walk
		change func(t *testing.T, dir string)
		// paths examined after the change (relative; none: the first walk is checked)
		paths []string
		held  []string // files held when the paths are examined (relative)
		fail  []string // folders whose watch fails (relative)
		read  []string
		gone  []string
		// watched, after: folders watched (relative)
		watched  []string
		problems []string // "path: reason"
	}{
		{
			name:    "nested folders are walked and watched; hidden entries and other files are not",
			before:  []string{"a/b/c/x.yaml", "a/y.yml", "z.json", "Z.YAML", "notes.txt", ".hidden/h.yaml", ".h.yaml", "a/empty/"},
			read:    []string{"Z.YAML", "a/b/c/x.yaml", "a/y.yml", "z.json"},
			watched: []string{".", "a", "a/b", "a/b/c", "a/empty"},
		},
		{
			name:   "a folder removed takes its files and its watches with it",
			before: []string{"sub/a.yaml", "sub/deep/b.yaml", "top.yaml"},
			change: func(t *testing.T, dir string) { _ = os.RemoveAll(filepath.Join(dir, "sub")) },
			paths:  []string{"sub"}, held: []string{"sub/a.yaml", "sub/deep/b.yaml", "top.yaml"},
			gone: []string{"sub/a.yaml", "sub/deep/b.yaml"}, watched: []string{"."},
		},
		{
			name:   "a file replaced by a folder, and a folder by a file",
			before: []string{"c.yaml", "d.yaml/e.yaml"},
			change: func(t *testing.T, dir string) {
				_ = os.Remove(filepath.Join(dir, "c.yaml"))
				_ = os.RemoveAll(filepath.Join(dir, "d.yaml"))
				layout(t, dir, "c.yaml/in.yaml", "d.yaml")
			},
			paths: []string{"c.yaml", "d.yaml"}, held: []string{"c.yaml", "d.yaml/e.yaml"},
			read: []string{"c.yaml/in.yaml", "d.yaml"}, gone: []string{"c.yaml", "d.yaml/e.yaml"}, watched: []string{".", "c.yaml"},
		},
		{
			name:   "a removal whose event was lost is found when the folder is walked again",
			before: []string{"sub/a.yaml"},
			change: func(t *testing.T, dir string) { _ = os.Remove(filepath.Join(dir, "sub", "a.yaml")) },
			paths:  []string{"."}, held: []string{"sub/a.yaml"},
			gone: []string{"sub/a.yaml"}, watched: []string{".", "sub"},
		},
		{
			name:   "a file renamed to a name that is not a manifest's is gone",
			before: []string{"a.yaml"},
			change: func(t *testing.T, dir string) {
				_ = os.Rename(filepath.Join(dir, "a.yaml"), filepath.Join(dir, "a.yaml.bak"))
			},
			paths: []string{"a.yaml", "a.yaml.bak"}, held: []string{"a.yaml"},
			gone: []string{"a.yaml"}, watched: []string{"."},
		},
		{
			name:     "a folder that cannot be watched is a problem; its files are still read",
			before:   []string{"sub/a.yaml", "b.yaml"},
			fail:     []string{"sub"},
			read:     []string{"b.yaml", "sub/a.yaml"},
			watched:  []string{"."},
			problems: []string{"sub: " + ReasonWatchFailed},
		},
		{
			// Symlinks are read, not judged: where they lead is the reader's to say.
			name:    "symlinks: to a file outside, to a folder, in a loop, dangling",
			before:  []string{"out.yaml -> /etc/hostname", "dir.yaml -> sub", "sub/", "loop1.yaml -> loop2.yaml", "loop2.yaml -> loop1.yaml", "none.yaml -> missing"},
			read:    []string{"dir.yaml", "loop1.yaml", "loop2.yaml", "none.yaml", "out.yaml"},
			watched: []string{".", "sub"},
		},
		{
			name:   "a hidden entry swapped (a ConfigMap volume's ..data) reads the symlinks again",
			before: []string{"..v1/m.yaml", "..data -> ..v1", "m.yaml -> ..data/m.yaml", "plain.yaml"},
			change: func(t *testing.T, dir string) {
				layout(t, dir, "..v2/m.yaml", "..tmp -> ..v2")
				_ = os.Rename(filepath.Join(dir, "..tmp"), filepath.Join(dir, "..data"))
			},
			paths: []string{"..data"}, held: []string{"m.yaml", "plain.yaml"},
			read: []string{"m.yaml"}, watched: []string{"."},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			layout(t, dir, tc.before...)
			w := newFakeWatcher()
			for _, f := range tc.fail {
				w.fail[filepath.Join(dir, f)] = true
			}
			tr := newTree(dir, false, w)
			if err := tr.setRoot(dir, true); err != nil {
				t.Fatal(err)
			}
			var c changes
			tr.examine(dir, &c, fileSet{})
			if tc.change != nil {
				tc.change(t, dir)
				held := fileSet{}
				for _, h := range tc.held {
					held[filepath.Join(dir, h)] = true
				}
				c = changes{}
				for _, p := range tc.paths {
					tr.examine(filepath.Join(dir, p), &c, held)
				}
			}
			if got := rels(dir, c.read); !slices.Equal(got, sorted(tc.read)) {
				t.Errorf("read %v, want %v", got, tc.read)
			}
			if got := rels(dir, collections.SortedKeys(c.gone)); !slices.Equal(got, sorted(tc.gone)) {
				t.Errorf("gone %v, want %v", got, tc.gone)
			}
			if got := rels(dir, collections.SortedKeys(w.watched)); !slices.Equal(got, sorted(tc.watched)) {
				t.Errorf("watched %v, want %v", got, tc.watched)
			}
			if got := rels(dir, collections.SortedKeys(tr.dirs)); !slices.Equal(got, rels(dir, collections.SortedKeys(w.watched))) && tc.fail == nil {
				t.Errorf("the tree holds the folders %v, watched %v", got, w.watched)
			}
			var problems []string
			for _, pp := range c.problems {
				problems = append(problems, rels(dir, []string{pp.path})[0]+": "+pp.problem.Reason)
			}
			if !slices.Equal(sorted(problems), sorted(tc.problems)) {
				t.Errorf("problems %v, want %v", problems, tc.problems)
			}
		})
	}
}

// TestTreeFollowsARootSymlink: a root given as a symlink serves its target; re-pointed, the old
// target's files are gone and its folders no longer watched, and the new one is examined, in the
// same changes; a link that leads nowhere keeps the old target and says so.
func TestTreeFollowsARootSymlink(t *testing.T) {
	dir := t.TempDir()
	layout(t, dir, "v1/a.yaml", "v1/sub/b.yaml", "v2/c.yaml", "v2/new/d.yaml", "current -> v1")
	link := filepath.Join(dir, "current")
	w := newFakeWatcher()
	_ = w.add(dir) // the link's folder, as NewFiles watches it
	tr := newTree(link, true, w)
	root, folder, err := tr.locate()
	if err != nil || root != filepath.Join(dir, "v1") || !folder {
		t.Fatalf("locate: %s %v %v", root, folder, err)
	}
	if err := tr.setRoot(root, folder); err != nil {
		t.Fatal(err)
	}
	var c changes
	tr.examine(tr.root, &c, fileSet{})
	held := fileSet{}
	for _, p := range c.read {
		held[p] = true
	}

	// Not re-pointed: nothing.
	c = changes{}
	if _, moved := tr.follow(&c, held); moved || c.retargeted || len(c.read)+len(c.gone) > 0 || tr.linkProblem != nil {
		t.Fatalf("an unchanged link moved: %+v", c)
	}

	repoint(t, "v2", link)
	c = changes{}
	from, moved := tr.follow(&c, held)
	if !moved || from != filepath.Join(dir, "v1") || !c.retargeted || tr.root != filepath.Join(dir, "v2") {
		t.Fatalf("re-pointed: moved %v from %s, root %s", moved, from, tr.root)
	}
	if got := rels(dir, collections.SortedKeys(c.gone)); !slices.Equal(got, []string{"v1/a.yaml", "v1/sub/b.yaml"}) {
		t.Errorf("gone %v", got)
	}
	if got := rels(dir, c.read); !slices.Equal(got, []string{"v2/c.yaml", "v2/new/d.yaml"}) {
		t.Errorf("read %v", got)
	}
	if got := rels(dir, collections.SortedKeys(w.watched)); !slices.Equal(got, []string{".", "v2", "v2/new"}) {
		t.Errorf("watched %v: the old folders must go, the link's stay", got)
	}
	if got := tr.rel(filepath.Join(dir, "v2", "new", "d.yaml")); got != "new/d.yaml" {
		t.Errorf("rel %s: problems are named from the new root", got)
	}

	// Leading nowhere: v2 is kept, and the link reported until it leads somewhere again.
	repoint(t, "missing", link)
	c = changes{}
	if _, moved := tr.follow(&c, held); moved || tr.root != filepath.Join(dir, "v2") || len(c.gone) > 0 {
		t.Fatalf("a dangling link moved the root to %s (gone %v)", tr.root, c.gone)
	}
	if p := tr.linkProblem; p == nil || p.Reason != ReasonSymlinkBroken || !strings.Contains(p.Detail, "still serving "+filepath.Join(dir, "v2")) {
		t.Fatalf("link problem %+v", p)
	}
	repoint(t, "v2", link)
	if _, moved := tr.follow(&changes{}, held); moved || tr.linkProblem != nil {
		t.Errorf("back to the same target: moved %v, problem %+v", moved, tr.linkProblem)
	}
}

// TestTreeFileRoot: a file root (through a link, from a folder to another) is watched through
// its folder, named after the link, and read again when a hidden entry next to it changes.
func TestTreeFileRoot(t *testing.T) {
	dir := t.TempDir()
	layout(t, dir, "v1.yaml", "other/v2.yaml", "current.yaml -> v1.yaml", "unrelated.yaml")
	link := filepath.Join(dir, "current.yaml")
	w := newFakeWatcher()
	_ = w.add(dir)
	tr := newTree(link, true, w)
	root, folder, _ := tr.locate()
	if err := tr.setRoot(root, folder); err != nil {
		t.Fatal(err)
	}
	if tr.scope() != "" || tr.rel(root) != "current.yaml" {
		t.Errorf("scope %q, rel %q", tr.scope(), tr.rel(root))
	}
	for _, tc := range []struct {
		path string
		read []string
	}{
		{root, []string{"v1.yaml"}},
		{filepath.Join(dir, "..data"), []string{"v1.yaml"}},
		{filepath.Join(dir, "unrelated.yaml"), []string{}},
		{filepath.Join(dir, "other", "v2.yaml"), []string{}},
	} {
		var c changes
		tr.examine(tc.path, &c, fileSet{})
		if got := rels(dir, c.read); !slices.Equal(got, tc.read) {
			t.Errorf("%s: read %v, want %v", tc.path, got, tc.read)
		}
	}
	repoint(t, filepath.Join("other", "v2.yaml"), link)
	c := changes{}
	if _, moved := tr.follow(&c, fileSet{root: true}); !moved {
		t.Fatal("not re-pointed")
	}
	if got := rels(dir, collections.SortedKeys(w.watched)); !slices.Equal(got, []string{".", "other"}) {
		t.Errorf("watched %v", got)
	}
	if got := rels(dir, collections.SortedKeys(c.gone)); !slices.Equal(got, []string{"v1.yaml"}) {
		t.Errorf("gone %v", got)
	}
}

// TestTreeLinks: the symlinks resolving to a file, or into a folder, are found from it; a link
// re-pointed or forgotten is no longer.
func TestTreeLinks(t *testing.T) {
	dir := t.TempDir()
	tr := newTree(dir, false, newFakeWatcher())
	if err := tr.setRoot(dir, true); err != nil {
		t.Fatal(err)
	}
	real := func(p string) string { return filepath.Join(tr.rootReal, p) }
	tr.setLink(filepath.Join(dir, "l1.yaml"), real("real/t.yaml"))
	tr.setLink(filepath.Join(dir, "l2.yaml"), real("real/t.yaml"))
	tr.setLink(filepath.Join(dir, "l3.yaml"), real("other/u.yaml"))
	for _, tc := range []struct {
		path string
		want []string
	}{
		{"real/t.yaml", []string{"l1.yaml", "l2.yaml"}},
		{"real", []string{"l1.yaml", "l2.yaml"}},
		{"re", []string{}},
		{".", []string{"l1.yaml", "l2.yaml", "l3.yaml"}},
	} {
		if got := rels(dir, tr.linksTo(filepath.Join(dir, tc.path))); !slices.Equal(got, tc.want) {
			t.Errorf("links to %s: %v, want %v", tc.path, got, tc.want)
		}
	}
	tr.setLink(filepath.Join(dir, "l1.yaml"), real("other/u.yaml"))
	tr.setLink(filepath.Join(dir, "l2.yaml"), "")
	if got := rels(dir, tr.linksTo(filepath.Join(dir, "real"))); len(got) != 0 || len(tr.links) != 1 || len(tr.linkTargets) != 2 {
		t.Errorf("after re-pointing l1 and forgetting l2: links to real %v; links %v", got, tr.links)
	}
}
