package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/google/go-containerregistry/pkg/v1/validate"
)

// maxEntry bounds what is read of one archive or layer entry.
const maxEntry = 1 << 30

// Opened is an image read back from an archive.
type Opened struct {
	Digest v1.Hash
	Tag    string
	Image  v1.Image
	Config *v1.ConfigFile
	// Files are the entries of the image's filesystem, by name ("krteds", "etc/", ...), with
	// the body of each regular file.
	Files  map[string]*tar.Header
	Bodies map[string][]byte
	dir    string
}

// Close removes the unpacked layout.
func (o *Opened) Close() { _ = os.RemoveAll(o.dir) }

// Open unpacks an OCI layout archive, checks that it holds one image whose blobs match their
// digests and sizes (go-containerregistry's validate.Image: the manifest, the config, the
// layer's digest and diff id), and reads its filesystem.
func Open(archive string) (*Opened, error) {
	dir, err := os.MkdirTemp("", "krteds-image-check-")
	if err != nil {
		return nil, err
	}
	o := &Opened{dir: dir}
	if err := o.open(archive); err != nil {
		o.Close()
		return nil, fmt.Errorf("%s: %w", archive, err)
	}
	return o, nil
}

func (o *Opened) open(archive string) error {
	f, err := os.Open(archive)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := untarLayout(f, o.dir); err != nil {
		return err
	}
	p, err := layout.FromPath(o.dir)
	if err != nil {
		return fmt.Errorf("not an OCI image layout: %w", err)
	}
	idx, err := p.ImageIndex()
	if err != nil {
		return err
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return err
	}
	if len(im.Manifests) != 1 {
		return fmt.Errorf("the layout's index lists %d manifests, want 1", len(im.Manifests))
	}
	desc := im.Manifests[0]
	if desc.MediaType != types.OCIManifestSchema1 {
		return fmt.Errorf("the index lists a %s, want an OCI image manifest", desc.MediaType)
	}
	o.Digest, o.Tag = desc.Digest, desc.Annotations["org.opencontainers.image.ref.name"]
	if o.Image, err = p.Image(desc.Digest); err != nil {
		return err
	}
	if err := validate.Image(o.Image); err != nil {
		return fmt.Errorf("the image does not match its digests: %w", err)
	}
	if o.Config, err = o.Image.ConfigFile(); err != nil {
		return err
	}
	layers, err := o.Image.Layers()
	if err != nil {
		return err
	}
	if len(layers) != 1 {
		return fmt.Errorf("%d layers, want 1", len(layers))
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		return err
	}
	defer rc.Close()
	o.Files, o.Bodies = map[string]*tar.Header{}, map[string][]byte{}
	return eachEntry(rc, "the layer", func(h *tar.Header, body io.Reader) error {
		name := strings.TrimPrefix(h.Name, "./")
		if _, dup := o.Files[name]; dup {
			return fmt.Errorf("the layer has %s twice", name)
		}
		o.Files[name] = h
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(io.LimitReader(body, maxEntry))
			if err != nil {
				return fmt.Errorf("reading %s from the layer: %w", name, err)
			}
			o.Bodies[name] = b
		}
		return nil
	})
}

// eachEntry calls f with each entry of a tar archive (what names it in errors) and its body.
func eachEntry(r io.Reader, what string, f func(h *tar.Header, body io.Reader) error) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", what, err)
		}
		if err := f(h, tr); err != nil {
			return err
		}
	}
}

// untarLayout unpacks an archive of an OCI layout: regular files and directories only, every
// name inside dir.
func untarLayout(r io.Reader, dir string) error {
	return eachEntry(r, "the archive", func(h *tar.Header, body io.Reader) error {
		name := path.Clean(h.Name)
		if !filepath.IsLocal(name) {
			return fmt.Errorf("the archive names %q, outside the layout", h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			return os.MkdirAll(target, 0o755)
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			return writeFile(target, io.LimitReader(body, maxEntry), 0o644)
		}
		return fmt.Errorf("the archive's %s is neither a file nor a directory", h.Name)
	})
}

func writeFile(target string, r io.Reader, mode os.FileMode) error {
	f, err := os.OpenFile(target, os.O_CREATE|os.O_EXCL|os.O_WRONLY, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, r); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// shells are names no file of the image may have: the image needs no shell, and has none for
// someone who gets into the container to use.
var shells = []string{"sh", "bash", "ash", "dash", "zsh", "ksh", "busybox", "toybox"}

// Inspect lists everything about an opened image that differs from what krteds' image must be:
// its manifest and config types, platform, user, entrypoint, command, ports, labels, fixed
// timestamps, and its filesystem (the static binary, root-owned and not writable by the user,
// the nonroot user's passwd and group entries, a /tmp anyone may write, and nothing else: no
// shell, nothing setuid).
func Inspect(o *Opened, want Spec) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if mt, err := o.Image.MediaType(); err != nil || mt != types.OCIManifestSchema1 {
		fail("manifest media type %s (%v), want %s", mt, err, types.OCIManifestSchema1)
	}
	if m, err := o.Image.Manifest(); err != nil || m.Config.MediaType != types.OCIConfigJSON {
		fail("config media type is not %s (%v)", types.OCIConfigJSON, err)
	}
	if o.Tag != want.Version {
		fail("the index names the image %q, want its version %q", o.Tag, want.Version)
	}
	c := o.Config
	if c.OS != "linux" {
		fail("os %q, want linux", c.OS)
	}
	if !c.Created.Time.Equal(epoch) {
		fail("created %s, want %s (a fixed time: the same binary gives the same digest)", c.Created.Time, epoch)
	}
	if c.Config.User != User {
		fail("user %q, want %q (non-root)", c.Config.User, User)
	}
	if uid, _, _ := strings.Cut(c.Config.User, ":"); uid == "" || uid == "0" || uid == "root" {
		fail("the image runs as root (user %q)", c.Config.User)
	}
	if !slices.Equal(c.Config.Entrypoint, Entrypoint) {
		fail("entrypoint %q, want %q", c.Config.Entrypoint, Entrypoint)
	}
	if !slices.Equal(c.Config.Cmd, Cmd) {
		fail("cmd %q, want %q", c.Config.Cmd, Cmd)
	}
	if ports := slices.Sorted(maps.Keys(c.Config.ExposedPorts)); !slices.Equal(ports, Ports) {
		fail("exposed ports %q, want %q", ports, Ports)
	}
	labels := want.Labels()
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if got, v := c.Config.Labels[k], labels[k]; got != v {
			fail("label %s is %q, want %q", k, got, v)
		}
	}
	errs = append(errs, inspectFiles(o, c.Architecture)...)
	return errs
}

func inspectFiles(o *Opened, arch string) []error {
	var errs []error
	fail := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	expected := map[string]file{}
	for _, f := range rootfs(nil) {
		expected[f.name] = f
	}
	for _, name := range slices.Sorted(maps.Keys(o.Files)) {
		h := o.Files[name]
		if slices.Contains(shells, path.Base(strings.TrimSuffix(name, "/"))) {
			fail("the image has a shell: %s", name)
		}
		if h.Mode&(04000|02000) != 0 {
			fail("%s is setuid or setgid (mode %o)", name, h.Mode)
		}
		f, ok := expected[name]
		if !ok {
			fail("the image has %s, which krteds' image does not hold", name)
			continue
		}
		if h.Uid != 0 || h.Gid != 0 {
			fail("%s is owned by %d:%d, want root: the user must not be able to change it", name, h.Uid, h.Gid)
		}
		if h.Mode != f.mode {
			fail("%s has mode %o, want %o", name, h.Mode, f.mode)
		}
		if isDir := strings.HasSuffix(name, "/"); isDir != (h.Typeflag == tar.TypeDir) || (!isDir && h.Typeflag != tar.TypeReg) {
			fail("%s is of tar type %q", name, h.Typeflag)
		}
		if !h.ModTime.Equal(epoch) {
			fail("%s has time %s, want %s", name, h.ModTime, epoch)
		}
	}
	for name := range expected {
		if _, ok := o.Files[name]; !ok {
			fail("the image lacks %s", name)
		}
	}
	for name, body := range map[string]string{"etc/passwd": Passwd, "etc/group": Group} {
		if b, ok := o.Bodies[name]; ok && string(b) != body {
			fail("%s is %q, want %q", name, b, body)
		}
	}
	if bin, ok := o.Bodies["krteds"]; ok {
		got, err := staticELF(bytes.NewReader(bin))
		switch {
		case err != nil:
			fail("/krteds: %v", err)
		case got != arch:
			fail("/krteds is built for %s, the config says %s", got, arch)
		}
	}
	return errs
}

// Extract writes the image's filesystem into dir, with the layer's modes.
func Extract(o *Opened, dir string) error {
	for _, name := range slices.Sorted(maps.Keys(o.Files)) {
		h := o.Files[name]
		if !filepath.IsLocal(filepath.FromSlash(strings.TrimSuffix(name, "/"))) {
			return fmt.Errorf("the layer names %q, outside the root", name)
		}
		target := filepath.Join(dir, filepath.FromSlash(name))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := writeFile(target, bytes.NewReader(o.Bodies[name]), 0o600); err != nil {
				return err
			}
		default:
			return fmt.Errorf("%s: tar type %q is not extracted", name, h.Typeflag)
		}
		// Chmod, not the umask'd create mode: /tmp keeps its sticky bit, the binary its x bits.
		if err := os.Chmod(target, os.FileMode(h.Mode&0o777)|modeBits(h.Mode)); err != nil {
			return err
		}
	}
	return nil
}

// modeBits are the sticky, setuid and setgid bits of a tar mode, as os.FileMode has them.
func modeBits(m int64) os.FileMode {
	var out os.FileMode
	if m&0o1000 != 0 {
		out |= os.ModeSticky
	}
	if m&0o2000 != 0 {
		out |= os.ModeSetgid
	}
	if m&0o4000 != 0 {
		out |= os.ModeSetuid
	}
	return out
}
