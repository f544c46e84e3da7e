//go:build unix

package sources

import (
	"os"
	"syscall"
)

// openForReading opens a file without blocking (a FIFO that replaced the file between the stat
// and the open must not hang the reader).
func openForReading(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}

// hardLinked reports whether a file has more than one link: a new link to existing content.
func hardLinked(fi os.FileInfo) bool {
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && st.Nlink > 1
}
