package sources

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docPool is the objects the property test writes: every kind krteds reads, each in two
// variants, so that files rewrite, duplicate and override each other.
func docPool() []string {
	var out []string
	for v := 1; v <= 2; v++ {
		out = append(out,
			fmt.Sprintf("apiVersion: v1\nkind: Namespace\nmetadata: {name: ns1, labels: {v: '%d'}}\n", v),
			fmt.Sprintf("apiVersion: v1\nkind: Node\nmetadata: {name: node1, labels: {topology.kubernetes.io/zone: z%d}}\n", v),
			svcYAML("ns1", "svc", 80+v),
			fmt.Sprintf("apiVersion: v1\nkind: Pod\nmetadata: {name: p1, namespace: ns1, labels: {app: svc}}\nspec: {nodeName: node1}\nstatus: {phase: Running, podIP: 10.0.0.%d}\n", v),
			fmt.Sprintf("apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {name: svc-a, namespace: ns1, labels: {kubernetes.io/service-name: svc}}\naddressType: IPv4\nports: [{name: http, port: 8080}]\nendpoints: [{addresses: [10.0.0.%d], conditions: {ready: true}}]\n", v),
			fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: dr, namespace: ns1}\nspec: {host: svc, subsets: [{name: v%d, labels: {version: v%d}}]}\n", v, v),
			fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: default, namespace: ns1}\nspec: {egress: [{hosts: ['./*', 'ns%d/*']}]}\n", v),
			fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {name: other%d, namespace: ns2}\n", v),
			fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: ServiceEntry\nmetadata: {name: se, namespace: ns1}\nspec: {hosts: [api.example.com], resolution: STATIC, ports: [{number: 80, name: http}], endpoints: [{address: 10.1.0.%d}]}\n", v),
			fmt.Sprintf("apiVersion: networking.istio.io/v1\nkind: WorkloadEntry\nmetadata: {name: vm, namespace: ns1}\nspec: {address: 10.2.0.%d, labels: {app: svc}}\n", v),
			fmt.Sprintf("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: pa, namespace: ns1}\nspec: {selector: {matchLabels: {app: svc}}, portLevelMtls: {'%d': {mode: DISABLE}}}\n", 8080+v),
		)
	}
	return out
}

// content builds a file from some documents of the pool, as a plain stream or as a List.
func content(r *rand.Rand, pool []string) string {
	n := 1 + r.IntN(4)
	var docs []string
	for i := 0; i < n; i++ {
		docs = append(docs, pool[r.IntN(len(pool))])
	}
	if r.IntN(4) == 0 {
		var b strings.Builder
		b.WriteString("apiVersion: v1\nkind: List\nitems:\n")
		for _, d := range docs {
			for i, line := range strings.Split(strings.TrimSpace(d), "\n") {
				if i == 0 {
					b.WriteString("- " + line + "\n")
				} else {
					b.WriteString("  " + line + "\n")
				}
			}
		}
		return b.String()
	}
	return strings.Join(docs, "---\n")
}

// TestFilesPropertyMatchFreshLoad applies random sequences of file operations to a folder with a
// live source; after each sequence the source serves exactly what a fresh load of the folder
// gives, and it never stops following the folder. (Files that end a sequence as something other
// than a valid manifest, a FIFO say, keep their last objects by design: unit tests cover them.)
func TestFilesPropertyMatchFreshLoad(t *testing.T) {
	seed := uint64(1)
	if v, err := strconv.ParseUint(os.Getenv("KRTEDS_PROPERTY_SEED"), 10, 64); err == nil {
		seed = v
	}
	t.Logf("seed %d (KRTEDS_PROPERTY_SEED)", seed)
	r := rand.New(rand.NewPCG(seed, 7))
	pool := docPool()
	dir := t.TempDir()
	h := newHarness(t, dir)
	names := []string{"a.yaml", "b.yml", "c.json.yaml", "sub/d.yaml", "sub/e.yaml", "z.yaml"}
	path := func() string { return filepath.Join(dir, names[r.IntN(len(names))]) }
	ops := []struct {
		name string
		do   func(p string)
	}{
		{"create or rewrite in place", func(p string) {
			// Through a symlink this rewrites its target; a dangling or looping one is replaced.
			if os.MkdirAll(filepath.Dir(p), 0o755) != nil || os.WriteFile(p, []byte(content(r, pool)), 0o644) != nil {
				_ = os.RemoveAll(p)
				writeFile(t, p, content(r, pool))
			}
		}},
		{"write then rename", func(p string) {
			if fi, err := os.Lstat(p); err == nil && fi.IsDir() {
				_ = os.RemoveAll(p)
			}
			writeRename(t, p, content(r, pool))
		}},
		{"delete", func(p string) { _ = os.RemoveAll(p) }},
		{"truncate then complete", func(p string) {
			c := content(r, pool)
			_ = os.MkdirAll(filepath.Dir(p), 0o755)
			_ = os.RemoveAll(p)
			f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			half := len(c) / 2
			_, _ = f.WriteString(c[:half])
			_ = f.Sync()
			_, _ = f.WriteString(c[half:])
			_ = f.Close()
		}},
		{"make invalid then fix", func(p string) {
			_ = os.RemoveAll(p)
			writeFile(t, p, "apiVersion: v1\nkind: Service\nmetadata: {name: [broken\n")
			rel := strings.TrimPrefix(p, dir+"/")
			h.waitFor("the invalid file's problem", func() bool { return h.problem(rel) != nil })
			writeFile(t, p, content(r, pool))
		}},
		{"replace by a directory", func(p string) {
			_ = os.RemoveAll(p)
			writeFile(t, filepath.Join(p, "inner.yaml"), content(r, pool))
		}},
		{"empty the file", func(p string) {
			_ = os.RemoveAll(p)
			writeFile(t, p, "")
		}},
	}
	sequences := 40
	if testing.Short() {
		sequences = 10
	}
	for seq := 0; seq < sequences; seq++ {
		var log []string
		for i := 0; i < 1+r.IntN(12); i++ {
			op := ops[r.IntN(len(ops))]
			p := path()
			log = append(log, op.name+" "+strings.TrimPrefix(p, dir+"/"))
			op.do(p)
		}
		h.barrier()
		t.Logf("sequence %d: %s", seq, strings.Join(log, "; "))
		h.matchesFreshLoad()
	}
}
