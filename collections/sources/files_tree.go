package sources

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"go.uber.org/zap"

	"github.com/krteds/krteds/collections"
)

// changes gathers, while examining paths, the files to read and those that are gone. They are
// committed together: the objects of a file that is gone are removed only if no file read in
// the same batch defines them.
type changes struct {
	read []string
	gone map[string]bool
	// retargeted: the link was re-pointed in this batch.
	retargeted bool
	// asIs: a file another process is writing is read as it is (the first batch, after
	// waitForWriters), not left for its writer to close.
	asIs bool
}

// drop notes that a file is gone.
func (c *changes) drop(p string) {
	if c.gone == nil {
		c.gone = map[string]bool{}
	}
	c.gone[p] = true
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
