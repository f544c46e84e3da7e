//go:build !linux

package sources

import (
	"errors"

	"github.com/fsnotify/fsnotify"
)

// fsWatcher watches folders with fsnotify where inotify is not available. It cannot tell when a
// writer has finished, so a file written in place may be read before it is complete; the file
// is read again when the writer's later writes arrive. Write whole files with a rename.
type fsWatcher struct {
	w   *fsnotify.Watcher
	out chan watchEvent
}

func newWatcher() (watcher, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	fw := &fsWatcher{w: w, out: make(chan watchEvent, 4096)}
	go fw.read()
	return fw, nil
}

func (f *fsWatcher) add(dir string) error      { return f.w.Add(dir) }
func (f *fsWatcher) remove(dir string)         { _ = f.w.Remove(dir) }
func (f *fsWatcher) events() <-chan watchEvent { return f.out }
func (f *fsWatcher) close() error              { return f.w.Close() }

func (f *fsWatcher) read() {
	defer close(f.out)
	for {
		select {
		case ev, ok := <-f.w.Events:
			if !ok {
				return
			}
			switch {
			case ev.Has(fsnotify.Remove) || ev.Has(fsnotify.Rename):
				f.out <- watchEvent{path: ev.Name, op: opRemoved}
			case ev.Has(fsnotify.Write) || ev.Has(fsnotify.Create):
				f.out <- watchEvent{path: ev.Name, op: opWritten}
			}
		case err, ok := <-f.w.Errors:
			if !ok {
				return
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				f.out <- watchEvent{op: opOverflow}
			}
		}
	}
}
