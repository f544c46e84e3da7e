package sources

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"go.uber.org/zap"
	"istio.io/istio/pkg/kube/krt"

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
	// RemoveGrace is how long the objects of a file that went away are kept before they are
	// deleted, unless a file defines them again meanwhile (default 500 ms; negative: none). An
	// editor saving a file by renaming the original away and writing a new one takes tens of
	// milliseconds between the two.
	RemoveGrace time.Duration
	Log         *zap.Logger
}

// Files serves the objects of a folder of manifests (or of one file) as krt collections. Each
// file is applied whole or not at all: a file that fails to decode, or that cannot be read as a
// regular file inside the folder, keeps the objects it defined before and is reported in
// Problems until it is fixed. A change to one file costs that file: its documents are decoded
// (only those whose bytes changed), compared with what the file contributed before, and only the
// difference is written to the collections. When two files define the same object, the file
// whose path sorts last wins.
//
// Files is the loop and the lock over four parts, each with fields of its own: the tree (what is
// watched, and which paths a change concerns), the reader (a file's bytes to its objects), the
// owners (which file defines which object, and so what to write and delete) and the problem set
// (what Problems must say). The loop is the only writer; it holds mu while it calls a part, and
// writes to the collections without it, so Status may read the parts meanwhile.
type Files struct {
	o      FilesOptions
	log    *zap.Logger
	w      watcher
	static Static
	// problems is the collection the problem set writes.
	problems krt.StaticCollection[collections.ObjectProblems]
	reader   reader

	mu     sync.Mutex
	tree   *tree
	owners *owners
	probs  *problemSet
}

// DefaultRemoveGrace is how long the objects of a file that went away are kept by default.
const DefaultRemoveGrace = 500 * time.Millisecond

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
	if o.RemoveGrace == 0 {
		o.RemoveGrace = DefaultRemoveGrace
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
	s := &Files{o: o, log: log, reader: reader{max: o.MaxFileBytes}, owners: newOwners(o.RemoveGrace)}
	s.tree = newTree(abs, lst.Mode()&fs.ModeSymlink != 0, nil)
	root, folder, err := s.tree.locate()
	if err != nil {
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	if s.w, err = newWatcher(); err != nil {
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	s.tree.w = s.w
	if s.tree.link {
		// The link's folder: a re-pointed link is a change there.
		if err := s.w.add(filepath.Dir(abs)); err != nil {
			_ = s.w.close()
			return nil, fmt.Errorf("manifests %s: %w", path, err)
		}
	}
	if err := s.tree.setRoot(root, folder); err != nil {
		_ = s.w.close()
		return nil, fmt.Errorf("manifests %s: %w", path, err)
	}
	// Startup is a change like any other, from nothing: the whole tree, read and committed as
	// one batch. Only what a file still being written after StartupWait is differs: it is taken
	// as it is then, where later its writer's close is waited for.
	s.static = NewStatic(opts, nil)
	s.problems = krt.NewStaticCollection[collections.ObjectProblems](nil, nil, opts.WithName(NameManifestProblems)...)
	s.probs = newProblemSet(s.problems)
	c := changes{asIs: true}
	s.mu.Lock()
	s.examine(root, &c)
	ups := s.probs.pending(s.describe)
	s.mu.Unlock()
	s.probs.write(ups)
	waitForWriters(c.read, time.Now().Add(o.StartupWait))
	s.load(&c)
	return s, nil
}

// Inputs are the collections the manifests are served through.
func (s *Files) Inputs() collections.Inputs { return s.static.Inputs() }

// Problems holds, per file, why it is not applied as it stands (or which of its objects another
// file overrides); an entry disappears when the file is fixed or removed.
func (s *Files) Problems() krt.Collection[collections.ObjectProblems] { return s.problems }

// Run applies file changes until stop is closed. A burst of events is gathered for at most
// Coalesce before it is applied; the objects of files that went away are deleted once their
// grace ends.
func (s *Files) Run(stop <-chan struct{}) {
	defer func() { _ = s.w.close() }()
	pending := map[string]bool{}
	full := false
	var timer <-chan time.Time
	var grace *time.Timer
	expire := func() {
		if next := s.expireOrphans(time.Now()); !next.IsZero() {
			grace = time.NewTimer(time.Until(next))
		} else {
			grace = nil
		}
	}
	graceC := func() <-chan time.Time {
		if grace == nil {
			return nil
		}
		return grace.C
	}
	for {
		select {
		case <-stop:
			return
		case <-graceC():
			expire()
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
				s.mu.Lock()
				paths = map[string]bool{s.tree.root: true}
				for _, f := range s.owners.paths() {
					paths[f] = true
				}
				s.mu.Unlock()
			}
			s.apply(paths)
			if grace == nil {
				expire()
			}
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
	s.mu.Lock()
	linkWas := s.tree.linkProblem
	var from string
	var moved bool
	if s.tree.link {
		from, moved = s.tree.follow(&c, s.owners)
		s.noteProblems(&c)
	}
	for _, p := range collections.SortedKeys(paths) {
		s.examine(p, &c)
		c.read = append(c.read, s.tree.linksTo(p)...)
	}
	var link []problemUpdate
	if !sameProblem(linkWas, s.tree.linkProblem) {
		link = []problemUpdate{{key: KindManifestFile + "/" + s.tree.name(), op: linkProblems(s.tree.name(), s.tree.linkProblem)}}
	}
	ups := s.probs.pending(s.describe)
	root, given := s.tree.root, s.tree.given
	s.mu.Unlock()
	if moved {
		s.log.Info("manifests link re-pointed", zap.String("link", given), zap.String("from", from), zap.String("to", root))
	}
	s.probs.write(link)
	s.probs.write(ups)
	s.load(&c)
	if c.retargeted {
		// Problems are named from the root: those of the old target go.
		s.reconcileProblems()
	}
}

// examine has the tree examine p and records the problems it met (s.mu held).
func (s *Files) examine(p string, c *changes) {
	s.tree.examine(p, c, s.owners)
	s.noteProblems(c)
}

// noteProblems records the problems the tree met on the files they concern (s.mu held).
func (s *Files) noteProblems(c *changes) {
	for _, pp := range c.problems {
		s.owners.setProblem(pp.path, pp.problem, 0)
		s.probs.mark(pp.path)
	}
	c.problems = nil
}
