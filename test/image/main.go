// Command krteds-image builds krteds' container image without a container daemon, and checks
// one:
//
//	krteds-image build --binary krteds --version v0.3.0 --revision <commit> --out krteds-image.tar
//	krteds-image check --image krteds-image.tar --version v0.3.0 --revision <commit>
//
// build writes an OCI image layout in a tar archive: FROM scratch, one layer holding the static
// binary at /krteds, /etc/passwd and /etc/group naming the nonroot user, and /tmp; the user,
// entrypoint, command, ports and OCI labels the Dockerfile gives the image it builds; every
// timestamp fixed, so that the same binary gives the same digest. check reads an archive back,
// lists everything that differs from that, extracts the filesystem, and runs
// `krteds serve --demo` from it (as root: in a chroot of it, as the image's user) until /ready
// answers; it exits 1 on any difference.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "build":
		err = buildCommand(os.Args[2:])
	case "check":
		err = checkCommand(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "krteds-image:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: krteds-image build --binary PATH --version V --revision R --out FILE\n       krteds-image check --image FILE --version V --revision R [--run=false]")
	os.Exit(2)
}

func buildCommand(args []string) error {
	fs := flag.NewFlagSet("build", flag.ExitOnError)
	var s Spec
	fs.StringVar(&s.Binary, "binary", "", "a static linux krteds binary")
	fs.StringVar(&s.Version, "version", "", "krteds' version (org.opencontainers.image.version, and the image's tag)")
	fs.StringVar(&s.Revision, "revision", "", "krteds' commit (org.opencontainers.image.revision)")
	out := fs.String("out", "krteds-image.tar", "the OCI layout archive to write")
	_ = fs.Parse(args)
	img, err := Image(s)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := WriteArchive(img, s.Version, &buf); err != nil {
		return err
	}
	// Written whole, then renamed: a failed build never leaves half an archive.
	tmp := *out + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *out); err != nil {
		return err
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s: krteds %s (%s), %s, %d bytes\n", *out, s.Version, s.Revision, d, buf.Len())
	return nil
}

func checkCommand(args []string) error {
	fs := flag.NewFlagSet("check", flag.ExitOnError)
	var want Spec
	archive := fs.String("image", "krteds-image.tar", "the OCI layout archive to check")
	fs.StringVar(&want.Version, "version", "", "the version the image must carry")
	fs.StringVar(&want.Revision, "revision", "", "the commit the image must carry")
	run := fs.Bool("run", true, "run krteds serve --demo from the image's filesystem")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long krteds serve --demo may take to be ready")
	_ = fs.Parse(args)
	if want.Version == "" || want.Revision == "" {
		return fmt.Errorf("--version and --revision are required: the image's labels are checked against them")
	}
	o, err := Open(*archive)
	if err != nil {
		return err
	}
	defer o.Close()
	if errs := Inspect(o, want); len(errs) > 0 {
		lines := make([]string, len(errs))
		for i, e := range errs {
			lines[i] = "  " + e.Error()
		}
		return fmt.Errorf("%s is not krteds' image:\n%s", *archive, strings.Join(lines, "\n"))
	}
	fmt.Printf("%s: %s, %s/%s, user %s, entrypoint %q, cmd %q, ports %d, labels %s %s; files: %d, no shell; /krteds static\n",
		*archive, o.Digest, o.Config.OS, o.Config.Architecture, o.Config.Config.User, o.Config.Config.Entrypoint, o.Config.Config.Cmd,
		len(o.Config.Config.ExposedPorts), want.Version, want.Revision, len(o.Files))
	if !*run {
		return nil
	}
	root, err := os.MkdirTemp("", "krteds-image-root-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	root = filepath.Join(root, "rootfs")
	if err := os.Mkdir(root, 0o755); err != nil {
		return err
	}
	if err := Extract(o, root); err != nil {
		return fmt.Errorf("extracting the image's filesystem: %w", err)
	}
	// The folder above rootfs is the checker's own (0700); rootfs itself is what / will be.
	line, err := RunDemo(runner{root: root, cfg: o.Config, chroot: canChroot()}, want, *timeout)
	if err != nil {
		return err
	}
	fmt.Println(line)
	return nil
}
