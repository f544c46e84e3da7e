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
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/krteds/krteds/collections"
	"golang.org/x/sync/errgroup"
)

// readResult is one file as read from disk.
type readResult struct {
	path    string
	data    []byte
	hash    uint64
	problem *collections.Problem
	waiting bool
	// modTime is when the file was last written (unix ns).
	modTime int64
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

// load reads and decodes the files to read (in parallel), then commits them with the files that
// are gone, as one change.
func (s *Files) load(c *changes) {
	paths := slices.Compact(slices.Sorted(slices.Values(c.read)))
	results := make([]readResult, len(paths))
	decoded := make([]*Decoded, len(paths))
	errs := make([]error, len(paths))
	// A file found open for writing is checked again until settle, once for the whole batch: a
	// batch of many files held open costs 10 ms, not 10 ms a file.
	settle := time.Now().Add(settleTime)
	work := func(i int) {
		r := s.read(paths[i], settle)
		if c.asIs && r.waiting {
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
		d.ModTime = r.modTime
		decoded[i] = &d
	}
	var g errgroup.Group
	g.SetLimit(runtime.GOMAXPROCS(0))
	for i := range paths {
		g.Go(func() error { work(i); return nil })
	}
	_ = g.Wait()

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
	s.commit(commitPaths, next)
}

// read reads one manifest file: a regular file, or a symlink to a regular file inside the
// folder, at most MaxFileBytes. Anything else is a problem, and is never opened for reading.
func (s *Files) read(p string, settle time.Time) readResult {
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
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		r.problem = &collections.Problem{Reason: ReasonNotRegular, Detail: "replaced by something other than a regular file while opening"}
		return r
	}
	r.modTime = st.ModTime().UnixNano()
	if beingWritten(f) && stillWritten(f, settle) {
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
	r := readResult{path: p, data: data, hash: xxhash.Sum64(data)}
	if st, err := f.Stat(); err == nil {
		r.modTime = st.ModTime().UnixNano()
	}
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

// settleTime bounds how long a batch checks again the files it found open for writing.
const settleTime = 10 * time.Millisecond

// stillWritten checks again, until settle, a file found open for writing: the kernel queues a
// writer's close event before it drops the file's write access, so a read that event prompts
// can find the file still held for a moment, and would then wait for a close that has been.
func stillWritten(f *os.File, settle time.Time) bool {
	for time.Now().Before(settle) {
		time.Sleep(time.Millisecond)
		if !beingWritten(f) {
			return false
		}
	}
	return beingWritten(f)
}
