// Package examples holds the bundled example manifests, embedded in the binary for
// `krteds serve --demo`.
package examples

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// FS holds mesh/ (one cluster), east/ (a second cluster on another network) and late/ (a Pod to
// copy into mesh/).
//
//go:embed mesh/*.yaml east/*.yaml late/*.yaml
var FS embed.FS

// WriteTo copies the examples into dir (mesh/, east/, late/), for krteds to serve and watch.
func WriteTo(dir string) error {
	return fs.WalkDir(FS, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		target := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		b, err := FS.ReadFile(p)
		if err != nil {
			return fmt.Errorf("reading the embedded %s: %w", p, err)
		}
		return os.WriteFile(target, b, 0o644)
	})
}
