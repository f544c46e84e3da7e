package sources

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// inotifyWatcher watches folders with inotify. It reports a file when its writer closes it
// (IN_CLOSE_WRITE) or when it is moved into place, never while it is being written, so a file
// is read whole.
type inotifyWatcher struct {
	f   *os.File
	out chan watchEvent

	mu   sync.Mutex
	wds  map[int32]string
	dirs map[string]int32
}

const inotifyMask = unix.IN_CLOSE_WRITE | unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_CREATE |
	unix.IN_DELETE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR | unix.IN_DONT_FOLLOW

func newWatcher() (watcher, error) {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("inotify: %w", err)
	}
	w := &inotifyWatcher{
		f:    os.NewFile(uintptr(fd), "inotify"),
		out:  make(chan watchEvent, 4096),
		wds:  map[int32]string{},
		dirs: map[string]int32{},
	}
	go w.read()
	return w, nil
}

func (w *inotifyWatcher) add(dir string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	// Always ask the kernel: a folder removed and made again under the same name needs a new
	// watch, and the old one's IN_IGNORED may not have arrived yet (it then leaves this one be).
	wd, err := unix.InotifyAddWatch(int(w.f.Fd()), dir, inotifyMask)
	if err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	w.wds[int32(wd)] = dir
	w.dirs[dir] = int32(wd)
	return nil
}

func (w *inotifyWatcher) remove(dir string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	wd, ok := w.dirs[dir]
	if !ok {
		return
	}
	delete(w.dirs, dir)
	delete(w.wds, wd)
	_, _ = unix.InotifyRmWatch(int(w.f.Fd()), uint32(wd))
}

func (w *inotifyWatcher) events() <-chan watchEvent { return w.out }

func (w *inotifyWatcher) close() error { return w.f.Close() }

func (w *inotifyWatcher) read() {
	defer close(w.out)
	var buf [unix.SizeofInotifyEvent * 4096]byte
	for {
		n, err := w.f.Read(buf[:])
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.out <- watchEvent{op: opOverflow}
			}
			return
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := ""
			if ev.Len > 0 {
				raw := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
				for i, c := range raw {
					if c == 0 {
						raw = raw[:i]
						break
					}
				}
				name = string(raw)
			}
			off += unix.SizeofInotifyEvent + int(ev.Len)
			w.dispatch(ev.Wd, ev.Mask, name)
		}
	}
}

func (w *inotifyWatcher) dispatch(wd int32, mask uint32, name string) {
	if mask&unix.IN_Q_OVERFLOW != 0 {
		w.out <- watchEvent{op: opOverflow}
		return
	}
	w.mu.Lock()
	dir, ok := w.wds[wd]
	if mask&unix.IN_IGNORED != 0 && ok {
		delete(w.wds, wd)
		if w.dirs[dir] == wd {
			delete(w.dirs, dir)
		}
	}
	w.mu.Unlock()
	if !ok {
		return
	}
	path := dir
	if name != "" {
		path = filepath.Join(dir, name)
	}
	switch {
	case mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF|unix.IN_DELETE|unix.IN_MOVED_FROM) != 0:
		w.out <- watchEvent{path: path, op: opRemoved}
	case mask&(unix.IN_CLOSE_WRITE|unix.IN_MOVED_TO) != 0:
		w.out <- watchEvent{path: path, op: opWritten}
	case mask&unix.IN_CREATE != 0:
		w.out <- watchEvent{path: path, op: opCreated}
	}
}
