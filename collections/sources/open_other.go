//go:build !unix

package sources

import "os"

func openForReading(path string) (*os.File, error) { return os.Open(path) }

func hardLinked(os.FileInfo) bool { return false }
