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
	// orphans are the objects whose files went away, kept applied for RemoveGrace from when.
	orphans map[string]time.Time
}

// DefaultRemoveGrace is how long the objects of a file that went away are kept by default.
const DefaultRemoveGrace = 500 * time.Millisecond

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
	s := &Files{
		given: abs, link: lst.Mode()&fs.ModeSymlink != 0, o: o, log: log,
		files: map[string]*fileState{}, objects: map[string]*objectState{}, dirs: map[string]bool{}, dirty: map[string]bool{}, orphans: map[string]time.Time{},
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
	// Startup is a change like any other, from nothing: the whole tree, read and committed as
	// one batch. Only what a file still being written after StartupWait is differs: it is taken
	// as it is then, where later its writer's close is waited for.
	s.static = NewStatic(opts, nil)
	s.problems = krt.NewStaticCollection[collections.ObjectProblems](nil, nil, opts.WithName(NameManifestProblems)...)
	c := changes{asIs: true}
	s.examine(s.root, &c)
	s.waitForWriters(&c)
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
				paths = map[string]bool{s.root: true}
				s.mu.Lock()
				for f := range s.files {
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
	if s.link {
		s.follow(&c)
	}
	for _, p := range collections.SortedKeys(paths) {
		s.examine(p, &c)
		c.read = append(c.read, s.linksTo(p)...)
	}
	s.load(&c)
	if c.retargeted {
		// Problems are named from the root: those of the old target go.
		s.reconcileProblems()
	}
}
