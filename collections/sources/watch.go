package sources

// op says what happened to a path, as far as reading it goes.
type op int

const (
	// opWritten: a file's new content is complete (closed after writing, or moved into place).
	opWritten op = iota
	// opCreated: an entry was created; a regular file created this way is still being written,
	// unless it is a second link to existing content.
	opCreated
	// opRemoved: an entry was removed or moved away.
	opRemoved
	// opOverflow: events were lost; everything must be looked at again.
	opOverflow
)

type watchEvent struct {
	path string
	op   op
}

// watcher reports changes in watched folders (not recursively: each folder is added).
type watcher interface {
	add(dir string) error
	remove(dir string)
	events() <-chan watchEvent
	close() error
}
