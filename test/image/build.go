package main

import (
	"archive/tar"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// What the image is, as the Dockerfile says it too (TestDockerfileAgrees holds them together).
const (
	// User is the non-root user and group the image runs as (distroless' nonroot).
	User = "65532:65532"
	// Source is org.opencontainers.image.source.
	Source = "https://github.com/krteds/krteds"
	// Title is org.opencontainers.image.title.
	Title = "krteds"
	// Passwd and Group name the nonroot user, for tools that look the user up.
	Passwd = "root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/nonexistent:/sbin/nologin\n"
	Group  = "root:x:0:\nnonroot:x:65532:\n"
)

var (
	// Entrypoint and Cmd: `docker run krteds` serves ADS on every address; arguments replace Cmd.
	Entrypoint = []string{"/krteds"}
	Cmd        = []string{"serve", "--xds-addr", ":15010"}
	// Ports are the plaintext ADS, authenticated ADS and debug ports.
	Ports = []string{"15010/tcp", "15012/tcp", "15014/tcp"}
)

// epoch is every timestamp in the image: the same binary always gives the same digest.
var epoch = time.Unix(0, 0).UTC()

// Spec is what an image is built from.
type Spec struct {
	// Binary is the path of a static linux krteds binary.
	Binary string
	// Version and Revision are krteds' version and commit, as the binary was built with them.
	Version, Revision string
}

// Labels are the image's OCI labels.
func (s Spec) Labels() map[string]string {
	return map[string]string{
		"org.opencontainers.image.title":    Title,
		"org.opencontainers.image.source":   Source,
		"org.opencontainers.image.version":  s.Version,
		"org.opencontainers.image.revision": s.Revision,
	}
}

// file is one entry of the image's only layer.
type file struct {
	name     string // relative, "/"-separated; a directory ends with "/"
	mode     int64
	body     []byte
	uid, gid int
}

// rootfs is the image's filesystem: the binary, the user's passwd and group entries, and a /tmp
// any user may write (krteds serve --demo writes the examples there; the root filesystem may
// otherwise be read-only). Sorted by name.
func rootfs(binary []byte) []file {
	return []file{
		{name: "etc/", mode: 0o755},
		{name: "etc/group", mode: 0o644, body: []byte(Group)},
		{name: "etc/passwd", mode: 0o644, body: []byte(Passwd)},
		{name: "krteds", mode: 0o755, body: binary},
		{name: "tmp/", mode: 0o1777},
	}
}

// layerTar is the uncompressed layer: root-owned entries, every timestamp the epoch.
func layerTar(files []file) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, f := range files {
		h := &tar.Header{Name: f.name, Mode: f.mode, Uid: f.uid, Gid: f.gid, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: int64(len(f.body))}
		if f.name[len(f.name)-1] == '/' {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.name, err)
		}
		if _, err := tw.Write(f.body); err != nil {
			return nil, fmt.Errorf("layer entry %s: %w", f.name, err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// staticELF returns the GOARCH of a static linux ELF executable, or says why it is not one: a
// binary that needs a dynamic loader cannot start in an image that has none.
func staticELF(r io.ReaderAt) (string, error) {
	f, err := elf.NewFile(r)
	if err != nil {
		return "", fmt.Errorf("not an ELF executable: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return "", errors.New("dynamically linked (it names an ELF interpreter): build it with CGO_ENABLED=0")
		}
	}
	if f.Type != elf.ET_EXEC && f.Type != elf.ET_DYN {
		return "", fmt.Errorf("ELF type %s is not an executable", f.Type)
	}
	arch, ok := map[elf.Machine]string{elf.EM_X86_64: "amd64", elf.EM_AARCH64: "arm64", elf.EM_386: "386",
		elf.EM_ARM: "arm", elf.EM_PPC64: "ppc64le", elf.EM_S390: "s390x", elf.EM_RISCV: "riscv64"}[f.Machine]
	if !ok {
		return "", fmt.Errorf("ELF machine %s: no GOARCH krteds is built for", f.Machine)
	}
	return arch, nil
}

// Image builds the image of a spec.
func Image(s Spec) (v1.Image, error) {
	if s.Version == "" || s.Revision == "" {
		return nil, errors.New("the version and the revision are required: they are the image's labels")
	}
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, fmt.Errorf("reading the binary: %w", err)
	}
	arch, err := staticELF(bytes.NewReader(bin))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", s.Binary, err)
	}
	return assemble(s, rootfs(bin), arch)
}

// assemble makes the image of a filesystem.
func assemble(s Spec, files []file, arch string) (v1.Image, error) {
	raw, err := layerTar(files)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil },
		tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err = mutate.Append(img, mutate.Addendum{Layer: layer, History: v1.History{
		Created: v1.Time{Time: epoch}, CreatedBy: "krteds-image: COPY krteds /etc/passwd /etc/group /tmp/ /", Comment: "krteds " + s.Version,
	}})
	if err != nil {
		return nil, fmt.Errorf("adding the layer: %w", err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Created = "linux", arch, v1.Time{Time: epoch}
	cf.Config.User = User
	cf.Config.Entrypoint = slices.Clone(Entrypoint)
	cf.Config.Cmd = slices.Clone(Cmd)
	cf.Config.WorkingDir = "/"
	cf.Config.ExposedPorts = map[string]struct{}{}
	for _, p := range Ports {
		cf.Config.ExposedPorts[p] = struct{}{}
	}
	cf.Config.Labels = s.Labels()
	img, err = mutate.ConfigFile(img, cf)
	if err != nil {
		return nil, fmt.Errorf("writing the config: %w", err)
	}
	return img, nil
}

// WriteArchive writes an image as an OCI image layout in a tar archive (what `docker load`,
// `podman load` and `skopeo copy oci-archive:` read), its entries in a fixed order with fixed
// timestamps. The tag is the image's org.opencontainers.image.ref.name.
func WriteArchive(img v1.Image, tag string, w io.Writer) error {
	dir, err := os.MkdirTemp("", "krteds-image-layout-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return fmt.Errorf("writing the image layout: %w", err)
	}
	if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{"org.opencontainers.image.ref.name": tag})); err != nil {
		return fmt.Errorf("writing the image layout: %w", err)
	}
	var names []string
	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || path == dir {
			return err
		}
		names = append(names, path)
		return nil
	})
	if err != nil {
		return err
	}
	slices.Sort(names)
	tw := tar.NewWriter(w)
	for _, path := range names {
		rel, err := filepath.Rel(dir, path)
		if err != nil {
			return err
		}
		info, err := os.Lstat(path)
		if err != nil {
			return err
		}
		h := &tar.Header{Name: filepath.ToSlash(rel), Mode: 0o644, ModTime: epoch, Format: tar.FormatPAX, Typeflag: tar.TypeReg, Size: info.Size()}
		if info.IsDir() {
			h.Name, h.Mode, h.Typeflag, h.Size = h.Name+"/", 0o755, tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if !info.IsDir() {
			if err := copyFile(tw, path); err != nil {
				return err
			}
		}
	}
	return tw.Close()
}

func copyFile(w io.Writer, path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}
