package main

import (
	"archive/tar"
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
)

var (
	fakeOnce sync.Once
	fakeBin  string
	fakeErr  error
)

// fakeKrteds builds testdata/fakekrteds, static, as version v9.9.9 commit abc.
func fakeKrteds(t *testing.T) string {
	t.Helper()
	fakeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "fakekrteds-")
		if err != nil {
			fakeErr = err
			return
		}
		fakeBin = filepath.Join(dir, "krteds")
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-X main.version=v9.9.9 -X main.commit=abc", "-o", fakeBin, "./testdata/fakekrteds")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			fakeErr = err
			t.Logf("%s", out)
		}
	})
	if fakeErr != nil {
		t.Fatal(fakeErr)
	}
	return fakeBin
}

var fakeSpec = Spec{Version: "v9.9.9", Revision: "abc"}

func archiveOf(t *testing.T, img v1.Image, tag string) string {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteArchive(img, tag, &buf); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "image.tar")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func goodImage(t *testing.T) v1.Image {
	t.Helper()
	s := fakeSpec
	s.Binary = fakeKrteds(t)
	img, err := Image(s)
	if err != nil {
		t.Fatal(err)
	}
	return img
}

// TestSameBinarySameImage: two builds of one binary are the same archive, byte for byte; another
// version is another image.
func TestSameBinarySameImage(t *testing.T) {
	a, b := archiveOf(t, goodImage(t), "v9.9.9"), archiveOf(t, goodImage(t), "v9.9.9")
	ab, _ := os.ReadFile(a)
	bb, _ := os.ReadFile(b)
	if !bytes.Equal(ab, bb) {
		t.Fatal("two builds of the same binary differ")
	}
	s := fakeSpec
	s.Binary, s.Version = fakeKrteds(t), "v9.9.10"
	other, err := Image(s)
	if err != nil {
		t.Fatal(err)
	}
	d1, _ := goodImage(t).Digest()
	d2, _ := other.Digest()
	if d1 == d2 {
		t.Fatal("another version gave the same digest")
	}
}

// TestInspectFindsEveryDifference: the image built is krteds' image; each way an image can
// differ from it is reported, by what differs.
func TestInspectFindsEveryDifference(t *testing.T) {
	bin, err := os.ReadFile(fakeKrteds(t))
	if err != nil {
		t.Fatal(err)
	}
	cfgOf := func(t *testing.T, img v1.Image, f func(*v1.ConfigFile)) v1.Image {
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		cf = cf.DeepCopy()
		f(cf)
		out, err := mutate.ConfigFile(img, cf)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	files := func(f func([]file) []file) v1.Image {
		img, err := assemble(fakeSpec, f(rootfs(bin)), "amd64")
		if err != nil {
			t.Fatal(err)
		}
		return img
	}
	dynamic, _ := exec.LookPath("true")
	dynamicBin, _ := os.ReadFile(dynamic)
	for _, tc := range []struct {
		name string
		img  func(t *testing.T) v1.Image
		tag  string
		want string // "" for none
	}{
		{"krteds' image", goodImage, "v9.9.9", ""},
		{"root", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Config.User = "" })
		}, "v9.9.9", "runs as root"},
		{"uid 0", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Config.User = "0:0" })
		}, "v9.9.9", "runs as root"},
		{"a shell entrypoint", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Config.Entrypoint = []string{"/bin/sh", "-c"} })
		}, "v9.9.9", "entrypoint"},
		{"another command", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Config.Cmd = []string{"serve"} })
		}, "v9.9.9", "cmd"},
		{"a port less", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { delete(c.Config.ExposedPorts, "15012/tcp") })
		}, "v9.9.9", "exposed ports"},
		{"another version label", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Config.Labels["org.opencontainers.image.version"] = "v1" })
		}, "v9.9.9", "label org.opencontainers.image.version"},
		{"no source label", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { delete(c.Config.Labels, "org.opencontainers.image.source") })
		}, "v9.9.9", "label org.opencontainers.image.source"},
		{"a build time", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Created = v1.Time{Time: time.Now()} })
		}, "v9.9.9", "a fixed time"},
		{"another architecture", func(t *testing.T) v1.Image {
			return cfgOf(t, goodImage(t), func(c *v1.ConfigFile) { c.Architecture = "arm64" })
		}, "v9.9.9", "the config says arm64"},
		{"another tag", goodImage, "latest", `names the image "latest"`},
		{"a shell", func(*testing.T) v1.Image {
			return files(func(fs []file) []file {
				return append(fs, file{name: "bin/", mode: 0o755}, file{name: "bin/sh", mode: 0o755, body: dynamicBin})
			})
		}, "v9.9.9", "the image has a shell: bin/sh"},
		{"a setuid file", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { return append(fs, file{name: "x", mode: 0o4755}) })
		}, "v9.9.9", "x is setuid"},
		{"a binary the user may rewrite", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { fs[3].mode = 0o777; return fs })
		}, "v9.9.9", "krteds has mode 777"},
		{"a binary the user owns", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { fs[3].uid, fs[3].gid = 65532, 65532; return fs })
		}, "v9.9.9", "krteds is owned by 65532:65532"},
		{"a /tmp only root may write", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { fs[4].mode = 0o755; return fs })
		}, "v9.9.9", "tmp/ has mode 755"},
		{"no passwd", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { return slices.Delete(fs, 2, 3) })
		}, "v9.9.9", "lacks etc/passwd"},
		{"another passwd", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { fs[2].body = []byte("root:x:0:0::/:/bin/sh\n"); return fs })
		}, "v9.9.9", "etc/passwd is"},
		{"a dynamic binary", func(*testing.T) v1.Image {
			return files(func(fs []file) []file { fs[3].body = dynamicBin; return fs })
		}, "v9.9.9", "dynamically linked"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Open(archiveOf(t, tc.img(t), tc.tag))
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			var msgs []string
			for _, e := range Inspect(o, fakeSpec) {
				msgs = append(msgs, e.Error())
			}
			all := strings.Join(msgs, "\n")
			switch {
			case tc.want == "" && len(msgs) > 0:
				t.Fatalf("krteds' own image is reported:\n%s", all)
			case tc.want != "" && !strings.Contains(all, tc.want):
				t.Fatalf("want a report of %q, got:\n%s", tc.want, all)
			}
		})
	}
}

// TestBuildRefusesADynamicBinary: an image FROM scratch has no dynamic loader.
func TestBuildRefusesADynamicBinary(t *testing.T) {
	dynamic, err := exec.LookPath("true")
	if err != nil {
		t.Skip("no true(1) to try")
	}
	s := fakeSpec
	s.Binary = dynamic
	if _, err := Image(s); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Fatalf("building from %s: %v, want it refused as dynamically linked", dynamic, err)
	}
	s.Binary = filepath.Join(t.TempDir(), "missing")
	if _, err := Image(s); err == nil {
		t.Fatal("built an image of a missing binary")
	}
	s.Binary, s.Version = fakeKrteds(t), ""
	if _, err := Image(s); err == nil {
		t.Fatal("built an image without a version")
	}
}

// TestOpenRefusesHostileArchives: an archive naming files outside the layout, holding a link,
// or whose blobs do not match their digests is refused before anything is run from it.
func TestOpenRefusesHostileArchives(t *testing.T) {
	good, err := os.ReadFile(archiveOf(t, goodImage(t), "v9.9.9"))
	if err != nil {
		t.Fatal(err)
	}
	// rewrite copies the good archive through f, which may change an entry or add some.
	rewrite := func(f func(tw *tar.Writer, h *tar.Header, body []byte) bool) string {
		var out bytes.Buffer
		tw := tar.NewWriter(&out)
		tr := tar.NewReader(bytes.NewReader(good))
		for {
			h, err := tr.Next()
			if err != nil {
				break
			}
			var body bytes.Buffer
			_, _ = body.ReadFrom(tr)
			if f(tw, h, body.Bytes()) {
				continue
			}
			_ = tw.WriteHeader(h)
			_, _ = tw.Write(body.Bytes())
		}
		_ = tw.Close()
		p := filepath.Join(t.TempDir(), "bad.tar")
		if err := os.WriteFile(p, out.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, want string
		f          func(tw *tar.Writer, h *tar.Header, body []byte) bool
	}{
		{"a name outside", "outside the layout", func(tw *tar.Writer, h *tar.Header, _ []byte) bool {
			if h.Name == "oci-layout" {
				_ = tw.WriteHeader(&tar.Header{Name: "../escape", Mode: 0o644, Typeflag: tar.TypeReg})
			}
			return false
		}},
		{"a symlink", "neither a file nor a directory", func(tw *tar.Writer, h *tar.Header, _ []byte) bool {
			if h.Name == "oci-layout" {
				_ = tw.WriteHeader(&tar.Header{Name: "link", Linkname: "/etc/passwd", Typeflag: tar.TypeSymlink})
			}
			return false
		}},
		{"a changed layer", "does not match its digests", func(tw *tar.Writer, h *tar.Header, body []byte) bool {
			if h.Size < 1<<16 {
				return false // the layer is the large blob
			}
			body[len(body)/2] ^= 0xff
			_ = tw.WriteHeader(h)
			_, _ = tw.Write(body)
			return true
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o, err := Open(rewrite(tc.f))
			if err == nil {
				o.Close()
				t.Fatal("opened")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("%v, want %q", err, tc.want)
			}
		})
	}
}

// TestRunDemo runs the image's entrypoint as the checker does: as root, in a chroot of the
// image's filesystem as its user (the fake writes its demo folder under /tmp there); a server
// that exits, or says another version, fails the check.
func TestRunDemo(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		spec Spec
		want string
	}{
		{"serves", nil, fakeSpec, ""},
		{"exits", []string{"FAKE_FAIL=serve"}, fakeSpec, "exited before it was ready"},
		{"another version", nil, Spec{Version: "v1", Revision: "abc"}, `krteds version says version "v9.9.9"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			img := goodImage(t)
			cf, _ := img.ConfigFile()
			cf = cf.DeepCopy()
			cf.Config.Env = tc.env
			img, err := mutate.ConfigFile(img, cf)
			if err != nil {
				t.Fatal(err)
			}
			o, err := Open(archiveOf(t, img, "v9.9.9"))
			if err != nil {
				t.Fatal(err)
			}
			defer o.Close()
			root := filepath.Join(t.TempDir(), "rootfs")
			if err := os.Mkdir(root, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := Extract(o, root); err != nil {
				t.Fatal(err)
			}
			if fi, err := os.Stat(filepath.Join(root, "tmp")); err != nil || fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
				t.Fatalf("extracted /tmp: %v %v", fi.Mode(), err)
			}
			line, err := RunDemo(runner{root: root, cfg: o.Config, chroot: canChroot()}, tc.spec, 30*time.Second)
			switch {
			case tc.want == "" && err != nil:
				t.Fatal(err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("%v, want %q", err, tc.want)
			}
			if tc.want != "" {
				return
			}
			t.Log(line)
			demo, _ := filepath.Glob(filepath.Join(root, "tmp", "krteds-demo-*"))
			if len(demo) != 1 {
				t.Fatalf("the server made %d demo folders under the image's /tmp", len(demo))
			}
			if fi, err := os.Stat(demo[0]); err == nil && canChroot() && !ownedBy(fi, 65532) {
				t.Fatalf("the demo folder is not the image user's: %v", fi.Sys())
			}
		})
	}
}

// TestDockerfileAgrees: the Dockerfile builds the image krteds-image builds: the same user,
// entrypoint, command, ports, labels, passwd and group entries, and /tmp.
func TestDockerfileAgrees(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	stages := strings.Split(text, "\nFROM ")
	final := stages[len(stages)-1]
	if !strings.HasPrefix(final, "scratch") {
		t.Fatalf("the Dockerfile's image is FROM %s, want scratch", strings.SplitN(final, "\n", 2)[0])
	}
	inst := map[string][]string{}
	sc := bufio.NewScanner(strings.NewReader(strings.ReplaceAll(final, "\\\n", " ")))
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		inst[k] = append(inst[k], strings.TrimSpace(v))
	}
	jsonArray := func(k string) []string {
		var out []string
		if len(inst[k]) != 1 || json.Unmarshal([]byte(inst[k][0]), &out) != nil {
			t.Errorf("the Dockerfile's %s is %q, want one JSON array", k, inst[k])
		}
		return out
	}
	if got := jsonArray("ENTRYPOINT"); !slices.Equal(got, Entrypoint) {
		t.Errorf("ENTRYPOINT %q, krteds-image %q", got, Entrypoint)
	}
	if got := jsonArray("CMD"); !slices.Equal(got, Cmd) {
		t.Errorf("CMD %q, krteds-image %q", got, Cmd)
	}
	if got := inst["USER"]; !slices.Equal(got, []string{User}) {
		t.Errorf("USER %q, krteds-image %q", got, User)
	}
	var ports []string
	for _, e := range inst["EXPOSE"] {
		for _, p := range strings.Fields(e) {
			ports = append(ports, p+"/tcp")
		}
	}
	if slices.Sort(ports); !slices.Equal(ports, Ports) {
		t.Errorf("EXPOSE %q, krteds-image %q", ports, Ports)
	}
	labels := strings.Join(inst["LABEL"], " ")
	for k, v := range (Spec{Version: "${VERSION}", Revision: "${COMMIT}"}).Labels() {
		if !strings.Contains(labels, k+"="+v) && !strings.Contains(labels, k+`="`+v+`"`) {
			t.Errorf("the Dockerfile lacks LABEL %s=%s", k, v)
		}
	}
	if !slices.Equal(inst["COPY"], []string{"--from=build /out/ /"}) {
		t.Errorf("COPY %q: want the one layer the build stage prepares, --from=build /out/ /", inst["COPY"])
	}
	// The build stage writes the same passwd and group, and a /tmp anyone may write.
	build := strings.ReplaceAll(stages[len(stages)-2], "\\\n", " ")
	for _, want := range []string{
		"printf '" + strings.ReplaceAll(Passwd, "\n", `\n`) + "' > /out/etc/passwd",
		"printf '" + strings.ReplaceAll(Group, "\n", `\n`) + "' > /out/etc/group",
		"chmod 1777 /out/tmp",
		"-s -w -X github.com/krteds/krteds/outputs.Version=${VERSION} -X github.com/krteds/krteds/outputs.Commit=${COMMIT}",
		"CGO_ENABLED=0 go build -trimpath",
	} {
		if !strings.Contains(build, want) {
			t.Errorf("the Dockerfile's build stage lacks %s", want)
		}
	}
}
