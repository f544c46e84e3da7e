package sources

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestReader drives the reader alone, on one entry each: what it reads, and why it does not, a
// problem in every case where it does not (never a panic, never a block).
func TestReader(t *testing.T) {
	var wide strings.Builder
	for i := range 2000 {
		fmt.Fprintf(&wide, "---\n%s", svcYAML("wide", fmt.Sprint("s", i), 80))
	}
	deep := deepDocs()
	for _, tc := range []struct {
		name string
		// make makes the entry read (dir/m.yaml) and returns it; outside is another folder.
		make func(t *testing.T, dir, outside string) string
		max  int64
		// scope: the reader is told the folder (not: a file root, links may lead anywhere).
		fileRoot bool
		// objects decoded, or the problem's reason and a part of its detail.
		objects int
		reason  string
		detail  string
		// found: the entry exists; link: where it resolves to (relative to the folders' parent).
		found bool
		link  string
	}{
		{name: "a manifest", objects: 1, found: true,
			make: file(nsYAML("a"))},
		{name: "a wide file: thousands of documents", objects: 2000, found: true,
			make: file(wide.String())},
		{name: "a wide file over the limit", max: 64 << 10, reason: ReasonTooLarge, detail: "over the limit of 65536", found: true,
			make: file(wide.String())},
		{name: "a huge file: not read", max: 100, reason: ReasonTooLarge, detail: "over the limit of 100", found: true,
			make: file(nsYAML("big") + "# " + strings.Repeat("x", 200) + "\n")},
		{name: "a file nested millions deep (a flow sequence)", reason: ReasonInvalidManifest, detail: "exceeded max depth", found: true,
			make: file(string(deep["flow sequences"]))},
		{name: "a file nested thousands deep (block mappings)", reason: ReasonInvalidManifest, detail: "max depth", found: true,
			make: file(string(deep["block mappings"]))},
		{name: "an invalid manifest", reason: ReasonInvalidManifest, detail: "document 0", found: true,
			make: file("apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a\n")},
		{name: "a FIFO: not opened", reason: ReasonNotRegular, detail: "named pipe", found: true,
			make: func(t *testing.T, dir, _ string) string {
				p := filepath.Join(dir, "m.yaml")
				if err := syscall.Mkfifo(p, 0o644); err != nil {
					t.Fatal(err)
				}
				return p
			}},
		{name: "gone", reason: ReasonUnreadable,
			make: func(_ *testing.T, dir, _ string) string { return filepath.Join(dir, "m.yaml") }},
		{name: "a symlink inside the folder", objects: 1, found: true, link: "in/real.yaml",
			make: symlink("real.yaml", nsYAML("a"), false)},
		{name: "a symlink to a file outside", reason: ReasonSymlinkOutside, detail: "outside", found: true, link: "out/real.yaml",
			make: symlink("real.yaml", nsYAML("a"), true)},
		{name: "a file root's symlink may lead anywhere", fileRoot: true, objects: 1, found: true, link: "out/real.yaml",
			make: symlink("real.yaml", nsYAML("a"), true)},
		{name: "a symlink to a device", reason: ReasonSymlinkOutside, found: true, link: "/dev/zero",
			make: func(t *testing.T, dir, _ string) string {
				mustSymlink(t, "/dev/zero", filepath.Join(dir, "m.yaml"))
				return filepath.Join(dir, "m.yaml")
			}},
		{name: "a symlink to a folder", reason: ReasonSymlinkDirectory, found: true, link: "in/sub",
			make: func(t *testing.T, dir, _ string) string {
				writeFile(t, filepath.Join(dir, "sub", "x.yaml"), nsYAML("x"))
				mustSymlink(t, filepath.Join(dir, "sub"), filepath.Join(dir, "m.yaml"))
				return filepath.Join(dir, "m.yaml")
			}},
		{name: "a symlink loop", reason: ReasonSymlinkBroken, found: true,
			make: func(t *testing.T, dir, _ string) string {
				mustSymlink(t, "loop.yaml", filepath.Join(dir, "m.yaml"))
				mustSymlink(t, "m.yaml", filepath.Join(dir, "loop.yaml"))
				return filepath.Join(dir, "m.yaml")
			}},
		{name: "a dangling symlink", reason: ReasonSymlinkBroken, found: true,
			make: func(t *testing.T, dir, _ string) string {
				mustSymlink(t, "missing.yaml", filepath.Join(dir, "m.yaml"))
				return filepath.Join(dir, "m.yaml")
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := t.TempDir()
			dir, outside := filepath.Join(base, "in"), filepath.Join(base, "out")
			for _, d := range []string{dir, outside} {
				if err := os.Mkdir(d, 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p := tc.make(t, dir, outside)
			r := reader{max: tc.max}
			if r.max == 0 {
				r.max = 64 << 20
			}
			scope, _ := filepath.EvalSymlinks(dir)
			if tc.fileRoot {
				scope = ""
			}
			res := r.load(p, held{}, scope, time.Now(), false)
			switch {
			case tc.reason == "" && res.problem != nil:
				t.Fatalf("problem %+v", res.problem)
			case tc.reason == "" && (res.decoded == nil || len(res.decoded.Objects) != tc.objects || res.hash == 0):
				t.Fatalf("decoded %v, hash %x; want %d objects", res.decoded, res.hash, tc.objects)
			case tc.reason != "" && (res.problem == nil || res.problem.Reason != tc.reason || !strings.Contains(res.problem.Detail, tc.detail)):
				t.Fatalf("problem %.300v, want %s (%s)", res.problem, tc.reason, tc.detail)
			case tc.reason != "" && res.decoded != nil:
				t.Fatal("decoded despite a problem")
			}
			if tc.reason == ReasonInvalidManifest && res.hash == 0 {
				t.Error("an invalid file's content is not named: it would be read again at every event")
			}
			if tc.reason != "" && tc.reason != ReasonInvalidManifest && res.hash != 0 {
				t.Error("content named for a file not read")
			}
			link := res.link
			if realBase, _ := filepath.EvalSymlinks(base); link != "" && !strings.HasPrefix(tc.link, "/") {
				link, _ = filepath.Rel(realBase, link)
			}
			if res.found != tc.found || link != tc.link {
				t.Errorf("found %v, link %q; want %v, %q", res.found, link, tc.found, tc.link)
			}
		})
	}
}

// TestReaderDecodesOnlyWhatChanged: content the source holds is not decoded again; changed
// content is decoded with the cache of what was, and stamped with the file's time.
func TestReaderDecodesOnlyWhatChanged(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "m.yaml")
	writeFile(t, p, nsYAML("a")+"---\n"+nsYAML("b"))
	r := reader{max: 1 << 20}
	first := r.load(p, held{}, dir, time.Now(), false)
	if first.decoded == nil || len(first.decoded.Objects) != 2 || first.decoded.ModTime == 0 {
		t.Fatalf("first read: %+v", first)
	}
	if again := r.load(p, held{known: true, hash: first.hash}, dir, time.Now(), false); again.decoded != nil || again.problem != nil || again.hash != first.hash {
		t.Fatalf("unchanged content decoded again: %+v", again)
	}
	cache := first.decoded.cache()
	writeFile(t, p, nsYAML("a")+"---\n"+nsYAML("c"))
	next := r.load(p, held{known: true, hash: first.hash, cache: cache}, dir, time.Now(), false)
	if next.decoded == nil || len(next.decoded.Objects) != 2 || next.decoded.Objects[0].Obj != first.decoded.Objects[0].Obj {
		t.Fatalf("the unchanged document was not taken from the cache: %+v", next.decoded)
	}
}

// TestReaderWaitsForWriters: a file another process holds open for writing is not read, unless
// the caller takes it as it is (startup, once the wait is over).
func TestReaderWaitsForWriters(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("writers are seen through Linux leases")
	}
	dir := t.TempDir()
	p := filepath.Join(dir, "m.yaml")
	w, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.WriteString(nsYAML("a")); err != nil {
		t.Fatal(err)
	}
	r := reader{max: 1 << 20}
	if res := r.load(p, held{}, dir, time.Now(), false); !res.waiting || res.decoded != nil || !res.found {
		t.Fatalf("a file being written: %+v", res)
	}
	if res := r.load(p, held{}, dir, time.Now(), true); res.waiting || res.decoded == nil || !res.found {
		t.Fatalf("a file being written, taken as it is: %+v", res)
	}
}

// file makes dir/m.yaml holding data.
func file(data string) func(*testing.T, string, string) string {
	return func(t *testing.T, dir, _ string) string {
		p := filepath.Join(dir, "m.yaml")
		writeFile(t, p, data)
		return p
	}
}

// symlink makes dir/m.yaml a symlink to name holding data, in dir or in outside.
func symlink(name, data string, out bool) func(*testing.T, string, string) string {
	return func(t *testing.T, dir, outside string) string {
		target := filepath.Join(dir, name)
		if out {
			target = filepath.Join(outside, name)
		}
		writeFile(t, target, data)
		mustSymlink(t, target, filepath.Join(dir, "m.yaml"))
		return filepath.Join(dir, "m.yaml")
	}
}
