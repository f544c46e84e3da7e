package sources

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// beingWritten reports whether another process holds the file open for writing. A read lease can
// be taken only when nobody does; where leases are not permitted (another owner without
// CAP_LEASE, a file system without leases) it cannot tell and says no.
func beingWritten(f *os.File) bool {
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_RDLCK); err != nil {
		return errors.Is(err, unix.EAGAIN)
	}
	_, _ = unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	return false
}
