package sources

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/cespare/xxhash/v2"

	"github.com/krteds/krteds/collections"
)

// reader is the part of a manifests source that reads and decodes one file. It holds nothing
// but its size limit: what it returns depends only on the file and on what the caller tells it
// the source already holds of it, so files are read in parallel, without the source's lock.
type reader struct {
	// max bounds one file (MaxFileBytes); a larger file is not read.
	max int64
}

// held is what the source already holds of a file: the content it last dealt with (applied, or
// found invalid) and the decode cache of its documents.
type held struct {
	known bool
	hash  uint64
	cache decodeCache
}

// readResult is one file as read from disk.
type readResult struct {
	path string
	// hash is the content read (0: none, as when a problem kept it from being read).
	hash uint64
	// problem says why the file is not applied as it stands: unreadable, or invalid (then hash
	// is the invalid content).
	problem *collections.Problem
	// waiting: another process holds the file open for writing.
	waiting bool
	// modTime is when the file was last written (unix ns).
	modTime int64
	// decoded is the file's content when it changed and decodes; nil when it is what the source
	// holds, or there is a problem or a writer.
	decoded *Decoded
	// found: the entry exists; link is then the file it resolves to when it is a symlink.
	found bool
	link  string
	data  []byte
}

// load reads the file at p and decodes it unless its content is what was says the source holds.
// A symlink must resolve to a regular file within the folder scope ("": anywhere). A file
// another process is writing is checked again until settle; then it is waited for, or taken as
// it is when asIs.
func (r reader) load(p string, was held, scope string, settle time.Time, asIs bool) readResult {
	res := r.read(p, scope, settle)
	if asIs && res.waiting {
		// Still being written after the wait: take it as it is now.
		found, link := res.found, res.link
		res = r.readAnyway(p)
		res.found, res.link = found, link
	}
	if res.problem != nil || res.waiting {
		return res
	}
	data := res.data
	res.data = nil
	if was.known && was.hash == res.hash {
		return res // unchanged
	}
	d, err := Decode(data, was.cache)
	if err != nil {
		res.problem = &collections.Problem{Reason: ReasonInvalidManifest, Detail: err.Error()}
		return res
	}
	d.ModTime = res.modTime
	res.decoded = &d
	return res
}

// read reads one manifest file: a regular file, or a symlink to a regular file within scope, at
// most max bytes. Anything else is a problem, and is never opened for reading.
func (r reader) read(p, scope string, settle time.Time) readResult {
	res := readResult{path: p}
	target := p
	fi, err := os.Lstat(p)
	if err != nil {
		res.problem = &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}
		return res
	}
	res.found = true
	if fi.Mode()&fs.ModeSymlink != 0 {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			res.problem = &collections.Problem{Reason: ReasonSymlinkBroken, Detail: err.Error()}
			return res
		}
		res.link = real
		if scope != "" && !within(real, scope) {
			res.problem = &collections.Problem{Reason: ReasonSymlinkOutside, Detail: "points to " + real + ", outside " + scope}
			return res
		}
		if fi, err = os.Stat(real); err != nil {
			res.problem = &collections.Problem{Reason: ReasonSymlinkBroken, Detail: err.Error()}
			return res
		}
		if fi.IsDir() {
			res.problem = &collections.Problem{Reason: ReasonSymlinkDirectory, Detail: "points to the folder " + real + "; symlinked folders are not followed"}
			return res
		}
		target = real
	}
	if !fi.Mode().IsRegular() {
		res.problem = &collections.Problem{Reason: ReasonNotRegular, Detail: "a " + fileKind(fi.Mode()) + " is not read"}
		return res
	}
	if fi.Size() > r.max {
		res.problem = &collections.Problem{Reason: ReasonTooLarge, Subject: "size", Detail: fmt.Sprintf("%d bytes, over the limit of %d", fi.Size(), r.max)}
		return res
	}
	f, err := openForReading(target)
	if err != nil {
		res.problem = &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}
		return res
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
		res.problem = &collections.Problem{Reason: ReasonNotRegular, Detail: "replaced by something other than a regular file while opening"}
		return res
	}
	res.modTime = st.ModTime().UnixNano()
	if beingWritten(f) && stillWritten(f, settle) {
		res.waiting = true
		return res
	}
	data, err := io.ReadAll(io.LimitReader(f, r.max+1))
	if err != nil {
		res.problem = &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}
		return res
	}
	if int64(len(data)) > r.max {
		res.problem = &collections.Problem{Reason: ReasonTooLarge, Subject: "size", Detail: fmt.Sprintf("over the limit of %d bytes", r.max)}
		return res
	}
	res.data, res.hash = data, xxhash.Sum64(data)
	return res
}

// readAnyway reads a file without the check for writers.
func (r reader) readAnyway(p string) readResult {
	f, err := openForReading(p)
	if err != nil {
		return readResult{path: p, problem: &collections.Problem{Reason: ReasonUnreadable, Detail: err.Error()}}
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, r.max+1))
	if err != nil || int64(len(data)) > r.max {
		return readResult{path: p, problem: &collections.Problem{Reason: ReasonUnreadable, Detail: fmt.Sprint("read while being written: ", err)}}
	}
	res := readResult{path: p, data: data, hash: xxhash.Sum64(data)}
	if st, err := f.Stat(); err == nil {
		res.modTime = st.ModTime().UnixNano()
	}
	return res
}

// waitForWriters (at startup) waits, until deadline, for the files another process is writing.
func waitForWriters(paths []string, deadline time.Time) {
	for _, p := range paths {
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
