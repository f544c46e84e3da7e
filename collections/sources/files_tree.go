package sources

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/krteds/krteds/collections"
)

// tree is the part of a manifests source that knows the file system: the path it was given
// (and, when that is a symlink, where it leads now), the folders under it and their watches, and
// the symlinks in them with the files they resolve to. It examines paths into changes (the files
// to read, those gone, and the problems met on the way); which files the source holds it asks of
// knownFiles. It is not safe for concurrent use: Files' lock guards it.
type tree struct {
	// given is the path the source was given, made absolute. When it is a symlink (link), the
	// source serves its target and follows it when the link is re-pointed.
	given string
	link  bool
	// root is what is served: given, or the target of the link (a folder or a file); rootReal
	// is the folder it resolves to (a file's folder).
	root     string
	rootReal string
	folder   bool
	// fileDir is the folder watched for a file root.
	fileDir string
	// linkProblem says why the link resolves to nothing now (the last target is kept).
	linkProblem *collections.Problem
	// w watches the folders; the tree adds and removes its watches, Files reads its events.
	w    watcher
	dirs map[string]bool
	// links maps the real path of a file to the symlinks in the folder that resolve to it: they
	// are read again when it changes.
	links map[string]map[string]bool
	// linkTargets maps each symlink of links to its target.
	linkTargets map[string]string
}

// knownFiles is what the tree asks of the files the source holds.
type knownFiles interface {
	// has reports whether p is a file the source holds.
	has(p string) bool
	// under lists the files held at p or under it.
	under(p string) []string
	// in lists the files held directly in the folder dir.
	in(dir string) []string
}

// changes gathers, while examining paths, the files to read and those that are gone. They are
// committed together: the objects of a file that is gone are removed only if no file read in
// the same batch defines them.
type changes struct {
	read []string
	gone map[string]bool
	// problems are those the walk met (a folder unreadable or not watched), to record.
	problems []pathProblem
	// retargeted: the link was re-pointed in this batch.
	retargeted bool
	// asIs: a file another process is writing is read as it is (the first batch, after
	// waitForWriters), not left for its writer to close.
	asIs bool
}

type pathProblem struct {
	path    string
	problem *collections.Problem
}

// drop notes that a file is gone.
func (c *changes) drop(p string) {
	if c.gone == nil {
		c.gone = map[string]bool{}
	}
	c.gone[p] = true
}

// newTree makes the tree of the absolute path given (a symlink when link), watched by w; it
// serves nothing until setRoot.
func newTree(given string, link bool, w watcher) *tree {
	return &tree{given: given, link: link, w: w, dirs: map[string]bool{}, links: map[string]map[string]bool{}, linkTargets: map[string]string{}}
}

// locate says what the given path is now: itself, or the target of the link, and whether that
// is a folder.
func (t *tree) locate() (root string, folder bool, err error) {
	root = t.given
	if t.link {
		if root, err = filepath.EvalSymlinks(t.given); err != nil {
			return "", false, err
		}
	}
	st, err := os.Stat(root)
	if err != nil {
		return "", false, err
	}
	return root, st.IsDir(), nil
}

// setRoot makes root (a folder or a file) what the source serves; a file's folder is watched.
func (t *tree) setRoot(root string, folder bool) error {
	base := root
	if !folder {
		base = filepath.Dir(root)
	}
	real, err := filepath.EvalSymlinks(base)
	if err != nil {
		return err
	}
	fileDir := ""
	if !folder {
		if err := t.w.add(base); err != nil {
			return err
		}
		fileDir = base
	}
	t.root, t.folder, t.rootReal, t.fileDir = root, folder, real, fileDir
	return nil
}

// name is the name problems of the link (and of a file root) go by.
func (t *tree) name() string { return filepath.Base(t.given) }

// follow checks, in a batch, where the link leads: re-pointed, the old target is gone and the
// new one examined, in the same batch, so that the objects both define are never removed. It
// returns the old target when the target changed. A link that leads nowhere now keeps the old
// target served, and is reported (linkProblem) until it leads somewhere again.
func (t *tree) follow(c *changes, files knownFiles) (from string, moved bool) {
	root, folder, err := t.locate()
	if err == nil && root == t.root && folder == t.folder {
		t.linkProblem = nil
		return "", false
	}
	if err == nil {
		old := t.root
		if err = t.retarget(root, folder, c, files); err == nil {
			t.linkProblem = nil
			return old, true
		}
	}
	t.linkProblem = &collections.Problem{Reason: ReasonSymlinkBroken, Detail: err.Error() + "; still serving " + t.root}
	return "", false
}

// retarget drops everything of the old target (files, watches) into c and examines the new one.
func (t *tree) retarget(root string, folder bool, c *changes, files knownFiles) error {
	oldRoot, oldFolder, oldFileDir := t.root, t.folder, t.fileDir
	if err := t.setRoot(root, folder); err != nil {
		return err
	}
	linkDir := filepath.Dir(t.given)
	for _, f := range files.under(oldRoot) {
		c.drop(f)
	}
	for _, d := range collections.SortedKeys(t.dirs) {
		if d != linkDir && d != t.fileDir {
			t.w.remove(d)
		}
	}
	clear(t.dirs)
	if !oldFolder && oldFileDir != linkDir && oldFileDir != t.fileDir {
		t.w.remove(oldFileDir)
	}
	c.retargeted = true
	t.examine(t.root, c, files)
	return nil
}

// inScope reports whether an event path concerns the source.
func (t *tree) inScope(p string) bool {
	if !t.folder {
		return p == t.root || (filepath.Dir(p) == filepath.Dir(t.root) && hidden(p))
	}
	return within(p, t.root)
}

// within reports whether p is dir or under it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+string(filepath.Separator))
}

func hidden(p string) bool { return strings.HasPrefix(filepath.Base(p), ".") }

func manifestName(p string) bool {
	switch strings.ToLower(filepath.Ext(p)) {
	case ".yaml", ".yml", ".json":
		return !hidden(p)
	}
	return false
}

// examine looks at one path: a folder is watched and its entries examined; a manifest file (or
// symlink to one) is queued for reading; a path that is gone takes its files with it.
func (t *tree) examine(p string, c *changes, files knownFiles) {
	if !t.inScope(p) {
		return
	}
	if !t.folder && p != t.root {
		// A hidden entry next to the file changed (a ConfigMap volume swapping its data): read
		// the file again through its symlink.
		c.read = append(c.read, t.root)
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		t.forget(p, c, files)
		return
	}
	switch {
	case fi.IsDir() && t.folder:
		if p != t.root && hidden(p) {
			t.recheckSymlinks(filepath.Dir(p), c)
			return
		}
		if files.has(p) {
			t.forget(p, c, files) // a file replaced by a folder
		}
		t.watchDir(p, c)
		entries, err := os.ReadDir(p)
		if err != nil {
			c.problems = append(c.problems, pathProblem{p, &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}})
			return
		}
		present := map[string]bool{}
		for _, e := range entries {
			child := filepath.Join(p, e.Name())
			present[child] = true
			t.examine(child, c, files)
		}
		// Files known in p that are gone (their removal event may have been lost).
		for _, f := range files.in(p) {
			if !present[f] {
				t.forget(f, c, files)
			}
		}
	case hidden(p) && p != t.root:
		t.recheckSymlinks(filepath.Dir(p), c)
	case !manifestName(p) && p != t.root:
		t.forget(p, c, files)
	default:
		if t.dirs[p] {
			t.forget(p, c, files) // a folder replaced by a file
		}
		c.read = append(c.read, p)
	}
}

// recheckSymlinks queues every manifest symlink of a folder for reading: a hidden entry they may
// point through has changed.
func (t *tree) recheckSymlinks(dir string, c *changes) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if e.Type()&fs.ModeSymlink != 0 && manifestName(p) {
			c.read = append(c.read, p)
		}
	}
}

func (t *tree) watchDir(dir string, c *changes) {
	t.dirs[dir] = true
	if err := t.w.add(dir); err != nil {
		c.problems = append(c.problems, pathProblem{dir, &collections.Problem{Reason: ReasonWatchFailed, Detail: err.Error() + "; changes in this folder are not seen"}})
	}
}

// forget removes a path, and everything under it, from the source: its folders are no longer
// watched, and its files are gone (committed with the rest of the batch).
func (t *tree) forget(p string, c *changes, files knownFiles) {
	for d := range t.dirs {
		if d != t.root && within(d, p) {
			t.w.remove(d)
			delete(t.dirs, d)
		}
	}
	for _, f := range files.under(p) {
		c.drop(f)
	}
}

// scope is the folder a symlink must resolve into to be read ("": a file root, anywhere).
func (t *tree) scope() string {
	if !t.folder {
		return ""
	}
	return t.rootReal
}

// rel is a file's path relative to the source's root, as problems name it (a file root, by the
// name it was given).
func (t *tree) rel(p string) string {
	base := t.root
	if !t.folder {
		if p == t.root {
			return t.name()
		}
		base = filepath.Dir(t.root)
	}
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}

// linksTo lists the symlinks that resolve to p, or to a file under p.
func (t *tree) linksTo(p string) []string {
	real := filepath.Join(t.rootReal, t.rel(p))
	var out []string
	for target, links := range t.links {
		if within(target, real) {
			for l := range links {
				out = append(out, l)
			}
		}
	}
	return out
}

// setLink notes that symlink link resolves to target ("" forgets it).
func (t *tree) setLink(link, target string) {
	if old, ok := t.linkTargets[link]; ok && old != target {
		delete(t.links[old], link)
		if len(t.links[old]) == 0 {
			delete(t.links, old)
		}
		delete(t.linkTargets, link)
	}
	if target == "" {
		return
	}
	if t.links[target] == nil {
		t.links[target] = map[string]bool{}
	}
	t.links[target][link] = true
	t.linkTargets[link] = target
}
