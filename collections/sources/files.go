package sources

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cespare/xxhash/v2"
	"go.uber.org/zap"
	"istio.io/istio/pkg/kube/krt"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
)

// Reasons a manifest file is not applied (as it stands now).
const (
	ReasonInvalidManifest  = "invalid_manifest"
	ReasonTooLarge         = "file_too_large"
	ReasonNotRegular       = "not_a_regular_file"
	ReasonSymlinkOutside   = "symlink_leaves_folder"
	ReasonSymlinkBroken    = "symlink_unresolvable"
	ReasonSymlinkDirectory = "symlink_to_directory"
	ReasonUnreadable       = "unreadable"
	ReasonDuplicateObject  = "duplicate_object"
	ReasonWatchFailed      = "watch_failed"
)

// KindManifestFile is the problem kind of manifest files.
const KindManifestFile = "ManifestFile"

// NameManifestProblems names the collection of manifest file problems.
const NameManifestProblems = "manifests/Problems"

// FilesOptions tunes a manifests source; zero values take the defaults.
type FilesOptions struct {
	// MaxFileBytes bounds one file (default 64 MiB); larger files are not read.
	MaxFileBytes int64
	// Coalesce is how long a burst of file events is gathered before it is applied (default 2 ms).
	Coalesce time.Duration
	// StartupWait bounds how long startup waits for a file another process is writing (default 10 s).
	StartupWait time.Duration
	Log         *zap.Logger
}

// Files serves the objects of a folder of manifests (or of one file) as krt collections. Each
// file is applied whole or not at all: a file that fails to decode, or that cannot be read as a
// regular file inside the folder, keeps the objects it defined before and is reported in
// Problems until it is fixed. A change to one file costs that file: its documents are decoded
// (only those whose bytes changed), compared with what the file contributed before, and only the
// difference is written to the collections. When two files define the same object, the file
// whose path sorts last wins.
type Files struct {
	// given is the path the source was given, made absolute. When it is a symlink (link), the
	// source serves its target and follows it when the link is re-pointed.
	given string
	link  bool
	// root is what is served: given, or the target of the link (a folder or a file); rootReal
	// is the folder it resolves to (a file's folder). They change, under mu, only in Run.
	root     string
	rootReal string
	folder   bool
	// fileDir is the folder watched for a file root.
	fileDir string
	// linkProblem says why the link resolves to nothing now (the last target is kept).
	linkProblem *collections.Problem
	o           FilesOptions
	log         *zap.Logger
	w           watcher

	static   Static
	problems krt.StaticCollection[collections.ObjectProblems]
	// started is set once the collections exist; before, changes are gathered for them.
	started bool

	mu      sync.Mutex
	files   map[string]*fileState
	objects map[string]*objectState
	dirs    map[string]bool
	// links maps the real path of a file to the symlinks in the folder that resolve to it: they
	// are read again when it changes.
	links map[string]map[string]bool
	// linkTargets maps each symlink of links to its target.
	linkTargets map[string]string
	// dirty lists files whose problems must be recomputed at the end of a batch.
	dirty map[string]bool
}

type fileState struct {
	hash    uint64 // the applied content; 0 before any
	objects []Object
	ignored map[string]int
	cache   decodeCache
	// problem says why the file's current content is not applied; failHash is that content.
	problem  *collections.Problem
	failHash uint64
	// waiting: another process holds the file open for writing; it is read when closed.
	waiting bool
	// shadowed maps objects of this file that another file also defines, and wins, to that file.
	shadowed map[string]string
	// dups are objects defined twice in this file.
	dups []string
}

type owner struct {
	file string
	obj  Object
}

type objectState struct {
	owners  []owner // sorted by file; the last wins
	applied *Object // what the collections hold
}

// NewFiles reads every manifest under path (a folder, walked recursively without hidden entries,
// or one file, or a symlink to either) and returns a source whose collections hold them. Files
// another process is writing are waited for (bounded). Run keeps the collections in step with
// the files, and with the link's target when path is a symlink re-pointed later.
func NewFiles(path string, opts krt.OptionsBuilder, o FilesOptions) (*Files, error) {
	if o.MaxFileBytes <= 0 {
		o.MaxFileBytes = 64 << 20
	}
	if o.Coalesce <= 0 {
		o.Coalesce = 2 * time.Millisecond
	}
	if o.StartupWait <= 0 {
		o.StartupWait = 10 * time.Second
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	lst, err := os.Lstat(abs)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	s := &Files{
		given: abs, link: lst.Mode()&fs.ModeSymlink != 0, o: o, log: log,
		files: map[string]*fileState{}, objects: map[string]*objectState{}, dirs: map[string]bool{}, dirty: map[string]bool{},
		links: map[string]map[string]bool{}, linkTargets: map[string]string{},
	}
	root, folder, err := s.locate()
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	if s.w, err = newWatcher(); err != nil {
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	if s.link {
		// The link's folder: a re-pointed link is a change there.
		if err := s.w.add(filepath.Dir(abs)); err != nil {
			_ = s.w.close()
			return nil, fmt.Errorf("manifests %s: %w", path, err)
		}
	}
	if err := s.setRoot(root, folder); err != nil {
		_ = s.w.close()
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	var c changes
	s.examine(s.root, &c)
	s.waitForWriters(&c)
	objs := s.load(&c, true)
	s.mu.Lock()
	probs := s.takeProblems()
	s.mu.Unlock()
	s.static = NewStatic(opts, nil, objs...)
	s.problems = krt.NewStaticCollection(nil, probs, opts.WithName(NameManifestProblems)...)
	s.started = true
	return s, nil
}

// locate says what the given path is now: itself, or the target of the link, and whether that
// is a folder.
func (s *Files) locate() (root string, folder bool, err error) {
	root = s.given
	if s.link {
		if root, err = filepath.EvalSymlinks(s.given); err != nil {
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
func (s *Files) setRoot(root string, folder bool) error {
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
		if err := s.w.add(base); err != nil {
			return err
		}
		fileDir = base
	}
	s.mu.Lock()
	s.root, s.folder, s.rootReal, s.fileDir = root, folder, real, fileDir
	s.mu.Unlock()
	return nil
}

// follow checks, in a batch, where the link leads: re-pointed, the old target is gone and the
// new one examined, in the same batch, so that the objects both define are never removed. It
// reports whether the target changed. A link that leads nowhere now keeps the old target served,
// and is reported until it leads somewhere again.
func (s *Files) follow(c *changes) bool {
	root, folder, err := s.locate()
	if err == nil && root == s.root && folder == s.folder {
		s.setLinkProblem(nil)
		return false
	}
	if err == nil {
		old := s.root
		if err = s.retarget(root, folder, c); err == nil {
			s.setLinkProblem(nil)
			s.log.Info("manifests link re-pointed", zap.String("link", s.given), zap.String("from", old), zap.String("to", root))
			return true
		}
	}
	s.setLinkProblem(&collections.Problem{Reason: ReasonSymlinkBroken, Detail: err.Error() + "; still serving " + s.root})
	return false
}

// retarget drops everything of the old target (files, watches) into c and examines the new one.
func (s *Files) retarget(root string, folder bool, c *changes) error {
	oldRoot, oldFolder, oldFileDir := s.root, s.folder, s.fileDir
	if err := s.setRoot(root, folder); err != nil {
		return err
	}
	linkDir := filepath.Dir(s.given)
	s.mu.Lock()
	var gone []string
	for f := range s.files {
		if f == oldRoot || strings.HasPrefix(f, oldRoot+string(filepath.Separator)) {
			gone = append(gone, f)
		}
	}
	dirs := collections.SortedKeys(s.dirs)
	clear(s.dirs)
	s.mu.Unlock()
	for _, f := range gone {
		c.drop(f)
	}
	for _, d := range dirs {
		if d != linkDir && d != s.fileDir {
			s.w.remove(d)
		}
	}
	if !oldFolder && oldFileDir != linkDir && oldFileDir != s.fileDir {
		s.w.remove(oldFileDir)
	}
	c.retargeted = true
	s.examine(s.root, c)
	return nil
}

// setLinkProblem records (nil: clears) why the link leads nowhere.
func (s *Files) setLinkProblem(p *collections.Problem) {
	s.mu.Lock()
	same := (p == nil && s.linkProblem == nil) || (p != nil && s.linkProblem != nil && *p == *s.linkProblem)
	s.linkProblem = p
	s.mu.Unlock()
	if same || !s.started {
		return
	}
	key := KindManifestFile + "/" + filepath.Base(s.given)
	if p == nil {
		s.problems.DeleteObject(key)
		return
	}
	pr := *p
	pr.Kind, pr.Object = KindManifestFile, filepath.Base(s.given)
	s.problems.ConditionalUpdateObject(collections.ObjectProblems{Kind: KindManifestFile, Object: pr.Object, Problems: []collections.Problem{pr}})
}

// Inputs are the collections the manifests are served through.
func (s *Files) Inputs() collections.Inputs { return s.static.Inputs() }

// Problems holds, per file, why it is not applied as it stands (or which of its objects another
// file overrides); an entry disappears when the file is fixed or removed.
func (s *Files) Problems() krt.Collection[collections.ObjectProblems] { return s.problems }

// Run applies file changes until stop is closed. A burst of events is gathered for at most
// Coalesce before it is applied.
func (s *Files) Run(stop <-chan struct{}) {
	defer func() { _ = s.w.close() }()
	pending := map[string]bool{}
	full := false
	var timer <-chan time.Time
	for {
		select {
		case <-stop:
			return
		case ev, ok := <-s.w.events():
			if !ok {
				return
			}
			switch {
			case ev.op == opOverflow:
				full = true
			case ev.op != opCreated || s.readOnCreate(ev.path):
				pending[ev.path] = true
			}
			if timer == nil {
				timer = time.After(s.o.Coalesce)
			}
		case <-timer:
			timer = nil
			paths := pending
			pending = map[string]bool{}
			if full {
				full = false
				paths = map[string]bool{s.root: true}
				s.mu.Lock()
				for f := range s.files {
					paths[f] = true
				}
				s.mu.Unlock()
			}
			s.apply(paths)
		}
	}
}

// readOnCreate reports whether a newly created entry can be read now: folders and symlinks
// can; a regular file is being written and is read when its writer closes it, unless it is a
// new link to content that already exists.
func (s *Files) readOnCreate(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil {
		return true // gone again: forget it
	}
	if !fi.Mode().IsRegular() {
		return true
	}
	return hardLinked(fi)
}

// apply examines the paths, reads what changed and applies the difference, as one change: a
// file renamed, or removed and another written with the same objects, moves them from one file
// to the other without removing them.
func (s *Files) apply(paths map[string]bool) {
	var c changes
	if s.link {
		s.follow(&c)
	}
	for _, p := range collections.SortedKeys(paths) {
		s.examine(p, &c)
		c.read = append(c.read, s.linksTo(p)...)
	}
	s.load(&c, false)
	if c.retargeted {
		// Problems are named from the root: those of the old target go.
		s.reconcileProblems()
	}
}

// reconcileProblems makes the Problems collection hold exactly the problems of the files known.
func (s *Files) reconcileProblems() {
	s.mu.Lock()
	want := map[string]collections.ObjectProblems{}
	for p := range s.files {
		if op := s.problemsOf(p); op != nil {
			want[op.ResourceName()] = *op
		}
	}
	if s.linkProblem != nil {
		pr := *s.linkProblem
		pr.Kind, pr.Object = KindManifestFile, filepath.Base(s.given)
		op := collections.ObjectProblems{Kind: KindManifestFile, Object: pr.Object, Problems: []collections.Problem{pr}}
		want[op.ResourceName()] = op
	}
	clear(s.dirty)
	s.mu.Unlock()
	for _, op := range s.problems.List() {
		if _, ok := want[op.ResourceName()]; !ok {
			s.problems.DeleteObject(op.ResourceName())
		}
	}
	for _, op := range want {
		s.problems.ConditionalUpdateObject(op)
	}
}

// linksTo lists the symlinks that resolve to p, or to a file under p.
func (s *Files) linksTo(p string) []string {
	real := filepath.Join(s.rootReal, s.rel(p))
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for target, links := range s.links {
		if target == real || strings.HasPrefix(target, real+string(filepath.Separator)) {
			for l := range links {
				out = append(out, l)
			}
		}
	}
	return out
}

// recordLink notes that symlink link resolves to target ("" forgets it).
func (s *Files) recordLink(link, target string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.setLink(link, target)
}

// setLink is recordLink with s.mu held.
func (s *Files) setLink(link, target string) {
	if old, ok := s.linkTargets[link]; ok && old != target {
		delete(s.links[old], link)
		if len(s.links[old]) == 0 {
			delete(s.links, old)
		}
		delete(s.linkTargets, link)
	}
	if target == "" {
		return
	}
	if s.links[target] == nil {
		s.links[target] = map[string]bool{}
	}
	s.links[target][link] = true
	s.linkTargets[link] = target
}

// changes gathers, while examining paths, the files to read and those that are gone. They are
// committed together: the objects of a file that is gone are removed only if no file read in
// the same batch defines them.
type changes struct {
	read []string
	gone map[string]bool
	// retargeted: the link was re-pointed in this batch.
	retargeted bool
}

// drop notes that a file is gone.
func (c *changes) drop(p string) {
	if c.gone == nil {
		c.gone = map[string]bool{}
	}
	c.gone[p] = true
}

// inScope reports whether an event path concerns the source.
func (s *Files) inScope(p string) bool {
	if !s.folder {
		return p == s.root || (filepath.Dir(p) == filepath.Dir(s.root) && hidden(p))
	}
	return p == s.root || strings.HasPrefix(p, s.root+string(filepath.Separator))
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
// symlink to one) is queued for reading; a path that is gone takes its objects with it.
func (s *Files) examine(p string, c *changes) {
	if !s.inScope(p) {
		return
	}
	if !s.folder && p != s.root {
		// A hidden entry next to the file changed (a ConfigMap volume swapping its data): read
		// the file again through its symlink.
		c.read = append(c.read, s.root)
		return
	}
	fi, err := os.Lstat(p)
	if err != nil {
		s.forget(p, c)
		return
	}
	switch {
	case fi.IsDir() && s.folder:
		if p != s.root && hidden(p) {
			s.recheckSymlinks(filepath.Dir(p), c)
			return
		}
		if s.known(p) {
			s.forget(p, c) // a file replaced by a folder
		}
		s.watchDir(p)
		entries, err := os.ReadDir(p)
		if err != nil {
			s.setProblem(p, &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}, 0)
			return
		}
		present := map[string]bool{}
		for _, e := range entries {
			child := filepath.Join(p, e.Name())
			present[child] = true
			s.examine(child, c)
		}
		// Files known under p that are gone (their removal event may have been lost).
		s.mu.Lock()
		var gone []string
		for f := range s.files {
			if filepath.Dir(f) == p && !present[f] {
				gone = append(gone, f)
			}
		}
		s.mu.Unlock()
		for _, f := range gone {
			s.forget(f, c)
		}
	case hidden(p) && p != s.root:
		s.recheckSymlinks(filepath.Dir(p), c)
	case !manifestName(p) && p != s.root:
		s.forget(p, c)
	default:
		if s.isDir(p) {
			s.forget(p, c) // a folder replaced by a file
		}
		c.read = append(c.read, p)
	}
}

// known reports whether p is a file the source holds.
func (s *Files) known(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.files[p] != nil
}

// isDir reports whether p is a folder the source watches.
func (s *Files) isDir(p string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dirs[p]
}

// recheckSymlinks queues every manifest symlink of a folder for reading: a hidden entry they may
// point through has changed.
func (s *Files) recheckSymlinks(dir string, c *changes) {
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

func (s *Files) watchDir(dir string) {
	s.mu.Lock()
	s.dirs[dir] = true
	s.mu.Unlock()
	if err := s.w.add(dir); err != nil {
		s.setProblem(dir, &collections.Problem{Reason: ReasonWatchFailed, Detail: err.Error() + "; changes in this folder are not seen"}, 0)
	}
}

// forget removes a path, and everything under it, from the source: its folders are no longer
// watched, and its files are gone (committed with the rest of the batch).
func (s *Files) forget(p string, c *changes) {
	s.mu.Lock()
	var gone []string
	for f := range s.files {
		if f == p || strings.HasPrefix(f, p+string(filepath.Separator)) {
			gone = append(gone, f)
		}
	}
	var dirs []string
	for d := range s.dirs {
		if d != s.root && (d == p || strings.HasPrefix(d, p+string(filepath.Separator))) {
			dirs = append(dirs, d)
			delete(s.dirs, d)
		}
	}
	s.mu.Unlock()
	for _, d := range dirs {
		s.w.remove(d)
	}
	for _, f := range gone {
		c.drop(f)
	}
}

// readResult is one file as read from disk.
type readResult struct {
	path    string
	data    []byte
	hash    uint64
	problem *collections.Problem
	waiting bool
}

// read reads one manifest file: a regular file, or a symlink to a regular file inside the
// folder, at most MaxFileBytes. Anything else is a problem, and is never opened for reading.
func (s *Files) read(p string) readResult {
	r := readResult{path: p}
	target := p
	fi, err := os.Lstat(p)
	if err != nil {
		r.problem = &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}
		return r
	}
	s.recordLink(p, "")
	if fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(p)
		if err == nil {
			s.recordLink(p, real)
		}
		if err != nil {
			r.problem = &collections.Problem{Reason: ReasonSymlinkBroken, Detail: err.Error()}
			return r
		}
		if s.folder && real != s.rootReal && !strings.HasPrefix(real, s.rootReal+string(filepath.Separator)) {
			r.problem = &collections.Problem{Reason: ReasonSymlinkOutside, Detail: "points to " + real + ", outside " + s.rootReal}
			return r
		}
		if fi, err = os.Stat(real); err != nil {
			r.problem = &collections.Problem{Reason: ReasonSymlinkBroken, Detail: err.Error()}
			return r
		}
		if fi.IsDir() {
			r.problem = &collections.Problem{Reason: ReasonSymlinkDirectory, Detail: "points to the folder " + real + "; symlinked folders are not followed"}
			return r
		}
		target = real
	}
	if !fi.Mode().IsRegular() {
		r.problem = &collections.Problem{Reason: ReasonNotRegular, Detail: "a " + fileKind(fi.Mode()) + " is not read"}
		return r
	}
	if fi.Size() > s.o.MaxFileBytes {
		r.problem = &collections.Problem{Reason: ReasonTooLarge, Subject: "size", Detail: fmt.Sprintf("%d bytes, over the limit of %d", fi.Size(), s.o.MaxFileBytes)}
		return r
	}
	f, err := openForReading(target)
	if err != nil {
		r.problem = &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}
		return r
	}
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		r.problem = &collections.Problem{Reason: ReasonNotRegular, Detail: "replaced by something other than a regular file while opening"}
		return r
	}
	if beingWritten(f) {
		r.waiting = true
		return r
	}
	data, err := io.ReadAll(io.LimitReader(f, s.o.MaxFileBytes+1))
	if err != nil {
		r.problem = &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}
		return r
	}
	if int64(len(data)) > s.o.MaxFileBytes {
		r.problem = &collections.Problem{Reason: ReasonTooLarge, Subject: "size", Detail: fmt.Sprintf("over the limit of %d bytes", s.o.MaxFileBytes)}
		return r
	}
	r.data, r.hash = data, xxhash.Sum64(data)
	return r
}

func fileKind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "named pipe"
	case m&fs.ModeSocket != 0:
		return "socket"
	case m&fs.ModeDevice != 0:
		return "device"
	case m.IsDir():
		return "folder"
	}
	return "special file"
}

// waitForWriters (at startup) waits, up to StartupWait, for files another process is writing.
func (s *Files) waitForWriters(c *changes) {
	deadline := time.Now().Add(s.o.StartupWait)
	for _, p := range c.read {
		for time.Now().Before(deadline) {
			f, err := openForReading(p)
			if err != nil {
				break
			}
			busy := beingWritten(f)
			_ = f.Close()
			if !busy {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// load reads and decodes the files to read (in parallel when there are many), then commits them
// with the files that are gone, as one change. At startup it returns the objects and problems to
// build the collections from instead of writing them.
func (s *Files) load(c *changes, startup bool) []any {
	paths := slices.Compact(slices.Sorted(slices.Values(c.read)))
	results := make([]readResult, len(paths))
	decoded := make([]*Decoded, len(paths))
	errs := make([]error, len(paths))
	work := func(i int) {
		r := s.read(paths[i])
		if startup && r.waiting {
			// Still being written after the wait: take it as it is now.
			r = s.readAnyway(paths[i])
		}
		results[i] = r
		if r.problem != nil || r.waiting {
			return
		}
		s.mu.Lock()
		fs := s.files[r.path]
		var cache decodeCache
		unchanged := false
		if fs != nil {
			cache = fs.cache
			unchanged = (fs.problem == nil && fs.hash == r.hash) || (fs.problem != nil && fs.failHash == r.hash)
		}
		s.mu.Unlock()
		if unchanged {
			return
		}
		d, err := Decode(r.data, cache)
		if err != nil {
			errs[i] = err
			return
		}
		decoded[i] = &d
	}
	parallel(len(paths), work)

	var commitPaths []string
	next := map[string]*Decoded{}
	for _, p := range paths {
		delete(c.gone, p) // there after all: what reading it found decides
	}
	for p := range c.gone {
		commitPaths = append(commitPaths, p) // absent from next: gone
	}
	for i, r := range results {
		switch {
		case r.waiting:
			s.mu.Lock()
			if fs := s.files[r.path]; fs != nil {
				fs.waiting = true
			} else {
				s.files[r.path] = &fileState{waiting: true}
			}
			s.mu.Unlock()
		case r.problem != nil:
			s.setProblem(r.path, r.problem, 0)
		case errs[i] != nil:
			s.setProblem(r.path, &collections.Problem{Reason: ReasonInvalidManifest, Detail: errs[i].Error()}, r.hash)
		case decoded[i] != nil:
			commitPaths = append(commitPaths, r.path)
			next[r.path] = decoded[i]
			s.mu.Lock()
			fs := s.file(r.path)
			fs.hash = r.hash
			s.mu.Unlock()
		default:
			// Unchanged content: only a problem with reading it (or a writer) may have gone.
			s.mu.Lock()
			if fs := s.files[r.path]; fs != nil && (fs.waiting || (fs.problem != nil && fs.failHash != r.hash)) {
				fs.waiting, fs.problem, fs.failHash = false, nil, 0
				s.dirty[r.path] = true
			}
			s.mu.Unlock()
		}
	}
	slices.Sort(commitPaths)
	return s.commit(commitPaths, next, startup)
}

// readAnyway reads a file without the check for writers.
func (s *Files) readAnyway(p string) readResult {
	f, err := openForReading(p)
	if err != nil {
		return readResult{path: p, problem: &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, s.o.MaxFileBytes+1))
	if err != nil || int64(len(data)) > s.o.MaxFileBytes {
		return readResult{path: p, problem: &collections.Problem{Reason: ReasonUnreadable, Detail: fmt.Sprint("read while being written: ", err)}}
	}
	return readResult{path: p, data: data, hash: xxhash.Sum64(data)}
}

func parallel(n int, f func(i int)) {
	workers := min(runtime.GOMAXPROCS(0), n)
	if workers <= 1 || n < 4 {
		for i := 0; i < n; i++ {
			f(i)
		}
		return
	}
	var wg sync.WaitGroup
	next := make(chan int, n)
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				f(i)
			}
		}()
	}
	wg.Wait()
}

// file returns the state of a file, creating it (s.mu held).
func (s *Files) file(p string) *fileState {
	fs := s.files[p]
	if fs == nil {
		fs = &fileState{}
		s.files[p] = fs
	}
	return fs
}

// setProblem records why a file's current content is not applied; it keeps its objects.
func (s *Files) setProblem(p string, prob *collections.Problem, hash uint64) {
	s.mu.Lock()
	fs := s.file(p)
	fs.problem, fs.failHash, fs.waiting = prob, hash, false
	s.dirty[p] = true
	s.mu.Unlock()
	s.flushProblems()
}

// commit makes the listed files contribute what next says (a file missing from next contributes
// nothing and is forgotten), and writes the difference to the collections. With startup set it
// returns the winning objects and the problems instead.
func (s *Files) commit(paths []string, next map[string]*Decoded, startup bool) []any {
	s.mu.Lock()
	touched := map[string]bool{}
	var gone []string
	for _, p := range paths {
		fs := s.files[p]
		d := next[p]
		var old []Object
		if fs != nil {
			old = fs.objects
		}
		oldByKey := make(map[string]Object, len(old))
		for _, o := range old {
			oldByKey[o.Key] = o
		}
		var objs []Object
		if d != nil {
			objs = d.Objects
		}
		for _, o := range objs {
			if prev, ok := oldByKey[o.Key]; ok && prev.Hash == o.Hash {
				delete(oldByKey, o.Key)
				continue
			}
			delete(oldByKey, o.Key)
			s.setOwner(o.Key, p, &o)
			touched[o.Key] = true
		}
		for k := range oldByKey {
			s.setOwner(k, p, nil)
			touched[k] = true
			if fs != nil {
				delete(fs.shadowed, k)
			}
		}
		if d == nil {
			if fs != nil {
				for k := range fs.shadowed {
					touched[k] = true
				}
			}
			delete(s.files, p)
			s.dirty[p] = true
			gone = append(gone, p)
			continue
		}
		fs = s.file(p)
		fs.objects, fs.ignored, fs.cache, fs.dups = d.Objects, d.Ignored, d.cache(), d.Duplicates
		fs.problem, fs.failHash, fs.waiting = nil, 0, false
		s.dirty[p] = true
	}
	for _, p := range gone {
		s.setLink(p, "") // a symlink that is gone no longer follows its target
	}
	var ups, dels []Object
	for k := range touched {
		st := s.objects[k]
		var win *Object
		if st != nil && len(st.owners) > 0 {
			win = &st.owners[len(st.owners)-1].obj
			for i, o := range st.owners {
				if fs := s.files[o.file]; fs != nil {
					if fs.shadowed == nil {
						fs.shadowed = map[string]string{}
					}
					if i < len(st.owners)-1 {
						fs.shadowed[k] = st.owners[len(st.owners)-1].file
					} else {
						delete(fs.shadowed, k)
					}
					s.dirty[o.file] = true
				}
			}
		}
		switch {
		case win == nil && st != nil && st.applied != nil:
			dels = append(dels, *st.applied)
			delete(s.objects, k)
		case win == nil:
			delete(s.objects, k)
		case st.applied == nil || st.applied.Hash != win.Hash:
			w := *win
			st.applied = &w
			ups = append(ups, w)
		}
	}
	s.mu.Unlock()

	// Referenced kinds first, so that an EndpointSlice finds the Pods written with it; deletions
	// in the opposite order.
	slices.SortFunc(ups, func(a, b Object) int {
		if a.Kind != b.Kind {
			return int(a.Kind - b.Kind)
		}
		return strings.Compare(a.Key, b.Key)
	})
	slices.SortFunc(dels, func(a, b Object) int {
		if a.Kind != b.Kind {
			return int(b.Kind - a.Kind)
		}
		return strings.Compare(a.Key, b.Key)
	})
	if startup {
		out := make([]any, 0, len(ups))
		for _, o := range ups {
			out = append(out, o.Obj)
		}
		return out
	}
	s.write(ups, dels)
	if len(ups)+len(dels) > 0 {
		files := make([]string, len(paths))
		for i, p := range paths {
			files[i] = s.rel(p)
		}
		s.log.Info("manifests applied", zap.Strings("files", files), zap.Int("written", len(ups)), zap.Int("deleted", len(dels)),
			zap.String("objects", summarize(ups, dels)))
	}
	s.flushProblems()
	return nil
}

// batchMin is the number of changes of one kind from which they are written as one batch.
const batchMin = 16

// write applies the changes in order, kind by kind: a kind with many changes as one batch.
func (s *Files) write(ups, dels []Object) {
	for i := 0; i < len(ups); {
		j := i
		for j < len(ups) && ups[j].Kind == ups[i].Kind {
			j++
		}
		if j-i >= batchMin {
			objs := make([]any, 0, j-i)
			for _, o := range ups[i:j] {
				objs = append(objs, o.Obj)
			}
			s.static.Batch(ups[i].Kind, objs, nil)
		} else {
			for _, o := range ups[i:j] {
				s.static.Apply(o.Obj, false)
			}
		}
		i = j
	}
	for i := 0; i < len(dels); {
		j := i
		for j < len(dels) && dels[j].Kind == dels[i].Kind {
			j++
		}
		if j-i >= batchMin {
			keys := make([]string, 0, j-i)
			for _, o := range dels[i:j] {
				keys = append(keys, krtKey(o.Obj))
			}
			s.static.Batch(dels[i].Kind, nil, keys)
		} else {
			for _, o := range dels[i:j] {
				s.static.Delete(o.Kind, krtKey(o.Obj))
			}
		}
		i = j
	}
}

// setOwner records (obj non-nil) or removes that file p defines key (s.mu held).
func (s *Files) setOwner(key, p string, obj *Object) {
	st := s.objects[key]
	if st == nil {
		if obj == nil {
			return
		}
		st = &objectState{}
		s.objects[key] = st
	}
	i, found := slices.BinarySearchFunc(st.owners, p, func(o owner, f string) int { return strings.Compare(o.file, f) })
	switch {
	case obj == nil && found:
		st.owners = slices.Delete(st.owners, i, i+1)
	case obj != nil && found:
		st.owners[i].obj = *obj
	case obj != nil:
		st.owners = slices.Insert(st.owners, i, owner{file: p, obj: *obj})
	}
}

func krtKey(obj any) string {
	if p, ok := obj.(*collections.Pod); ok {
		return p.Key
	}
	m := obj.(metav1.Object)
	if ns := m.GetNamespace(); ns != "" {
		return ns + "/" + m.GetName()
	}
	return m.GetName()
}

// summarize names the objects written (and, prefixed with "-", deleted), at most eight of them.
func summarize(ups, dels []Object) string {
	names := make([]string, 0, min(len(ups)+len(dels), 9))
	for i := 0; i < len(ups)+len(dels) && len(names) < 8; i++ {
		if i < len(ups) {
			names = append(names, ups[i].Key)
		} else {
			names = append(names, "-"+dels[i-len(ups)].Key)
		}
	}
	if n := len(ups) + len(dels) - len(names); n > 0 {
		names = append(names, fmt.Sprintf("and %d more", n))
	}
	return strings.Join(names, ", ")
}

// rel is a file's path relative to the source's root, as problems name it (a file root, by the
// name it was given).
func (s *Files) rel(p string) string {
	base := s.root
	if !s.folder {
		if p == s.root {
			return filepath.Base(s.given)
		}
		base = filepath.Dir(s.root)
	}
	if r, err := filepath.Rel(base, p); err == nil {
		return r
	}
	return p
}

// problemsOf computes the problems of one file (s.mu held).
func (s *Files) problemsOf(p string) *collections.ObjectProblems {
	fs := s.files[p]
	if fs == nil {
		return nil
	}
	op := collections.ObjectProblems{Kind: KindManifestFile, Object: s.rel(p)}
	if fs.problem != nil {
		pr := *fs.problem
		pr.Kind, pr.Object = KindManifestFile, op.Object
		if fs.hash != 0 {
			pr.Detail += "; the file's previous objects are kept"
		}
		op.Problems = append(op.Problems, pr)
	}
	if len(fs.shadowed) > 0 || len(fs.dups) > 0 {
		var lines []string
		for _, k := range collections.SortedKeys(fs.shadowed) {
			lines = append(lines, k+" is also defined in "+s.rel(fs.shadowed[k])+", which wins")
		}
		for _, k := range fs.dups {
			lines = append(lines, k+" is defined twice; the later document wins")
		}
		detail := strings.Join(lines[:min(len(lines), 5)], "; ")
		if len(lines) > 5 {
			detail += fmt.Sprintf("; and %d more", len(lines)-5)
		}
		op.Problems = append(op.Problems, collections.Problem{Kind: KindManifestFile, Object: op.Object, Reason: ReasonDuplicateObject, Detail: detail})
	}
	if len(op.Problems) == 0 {
		return nil
	}
	return &op
}

// takeProblems returns the problems of every dirty file and clears the dirty set (s.mu held).
func (s *Files) takeProblems() []collections.ObjectProblems {
	var out []collections.ObjectProblems
	for p := range s.dirty {
		if op := s.problemsOf(p); op != nil {
			out = append(out, *op)
		}
	}
	clear(s.dirty)
	return out
}

// flushProblems writes the problems of the dirty files to the Problems collection (at startup,
// before it exists, they wait for takeProblems).
func (s *Files) flushProblems() {
	if !s.started {
		return
	}
	s.mu.Lock()
	type upd struct {
		key string
		op  *collections.ObjectProblems
	}
	var ups []upd
	for p := range s.dirty {
		ups = append(ups, upd{key: KindManifestFile + "/" + s.rel(p), op: s.problemsOf(p)})
	}
	clear(s.dirty)
	s.mu.Unlock()
	for _, u := range ups {
		if u.op == nil {
			s.problems.DeleteObject(u.key)
		} else {
			s.problems.ConditionalUpdateObject(*u.op)
		}
	}
}

// FileStatus is one manifest file as /debug/sources shows it.
type FileStatus struct {
	Path    string         `json:"path"`
	Objects int            `json:"objects"`
	Ignored map[string]int `json:"ignored,omitempty"`
	// Applied is false when the file's current content is not applied (see Problems).
	Applied  bool                  `json:"applied"`
	Waiting  bool                  `json:"beingWritten,omitempty"`
	Problems []collections.Problem `json:"problems,omitempty"`
}

// Status lists every file the source knows, by path (and the link, when it leads nowhere).
func (s *Files) Status() []FileStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]FileStatus, 0, len(s.files)+1)
	if s.linkProblem != nil {
		pr := *s.linkProblem
		pr.Kind, pr.Object = KindManifestFile, filepath.Base(s.given)
		out = append(out, FileStatus{Path: pr.Object, Problems: []collections.Problem{pr}})
	}
	for _, p := range collections.SortedKeys(s.files) {
		fs := s.files[p]
		st := FileStatus{Path: s.rel(p), Objects: len(fs.objects), Ignored: fs.ignored, Applied: fs.problem == nil && !fs.waiting, Waiting: fs.waiting}
		if op := s.problemsOf(p); op != nil {
			st.Problems = op.Problems
		}
		out = append(out, st)
	}
	return out
}

// Skipped lists the files whose current content is not applied, with the reason.
func (s *Files) Skipped() []FileStatus {
	var out []FileStatus
	for _, st := range s.Status() {
		if !st.Applied {
			out = append(out, st)
		}
	}
	return out
}
