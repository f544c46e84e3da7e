package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// TestClusterFolders: a manifests folder with a sub-folder named after the local cluster is one
// folder per cluster; any other folder is the local cluster alone.
func TestClusterFolders(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{"Kubernetes", "east", "west", ".hidden"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "notes.yaml"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	local, remotes, err := clusterFolders(dir, "Kubernetes")
	if err != nil {
		t.Fatal(err)
	}
	if local != filepath.Join(dir, "Kubernetes") || len(remotes) != 2 || remotes[0].ID != "east" || remotes[1].ID != "west" ||
		remotes[0].Manifests != filepath.Join(dir, "east") {
		t.Fatalf("local %s, remotes %+v", local, remotes)
	}
	// Without a folder of the local cluster's name: one cluster.
	local, remotes, err = clusterFolders(dir, "other")
	if err != nil || local != dir || remotes != nil {
		t.Fatalf("local %s, remotes %+v, %v", local, remotes, err)
	}
}

func TestMistypedFlagSuggestsTheRightOne(t *testing.T) {
	root := newRootCommand()
	root.SetArgs([]string{"endpoints", "--clustr", "x"})
	root.SetOut(io.Discard)
	root.SetErr(io.Discard)
	err := root.Execute()
	if err == nil || !strings.Contains(err.Error(), "did you mean --cluster?") {
		t.Fatalf("error %v", err)
	}
}

// TestDocsListEveryServeFlag: the table of krteds serve's flags in docs/OPERATING.md names every
// flag the command has, and no other.
func TestDocsListEveryServeFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "OPERATING.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "| flag | default | meaning |")
	if start < 0 {
		t.Fatal("docs/OPERATING.md has no flag table")
	}
	table := text[start:]
	table = table[:strings.Index(table, "\n\n")]
	documented := map[string]bool{}
	for _, line := range strings.Split(table, "\n")[2:] {
		first := strings.Split(line, "|")[1]
		for _, f := range strings.Split(first, ",") {
			documented[strings.Trim(strings.TrimSpace(f), "`")] = true
		}
	}
	cmd := newServeCommand()
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if !documented["--"+f.Name] {
			t.Errorf("--%s is not in docs/OPERATING.md's table", f.Name)
		}
		delete(documented, "--"+f.Name)
	})
	for f := range documented {
		t.Errorf("docs/OPERATING.md lists %s, which krteds serve does not have", f)
	}
}

// TestMeshConfigClusterLocal: --mesh-config is read as istiod reads its mesh config (defaults
// applied, validated): defaultConfig.discoveryAddress (istiod's istio-system fallback when the
// file sets none) and serviceSettings decide the cluster-local hosts, with --cluster-local-host
// after them; an invalid file is an error naming it. Without it, the discovery address is that of
// a default install in --system-namespace.
func TestMeshConfigClusterLocal(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name, file, systemNS string
		extra                []string
		local, notLocal      []string
		err                  string
	}{{
		name:     "no mesh config: a default install in the system namespace",
		systemNS: "istio-control",
		local:    []string{"istiod.istio-control.svc.cluster.local", "kubernetes.default.svc.cluster.local"},
		notLocal: []string{"istiod.istio-system.svc.cluster.local"},
	}, {
		name: "a mesh config without defaultConfig: istiod's own default discovery address",
		file: write("empty.yaml", "trustDomain: cluster.local\n"), systemNS: "istio-control",
		local:    []string{"istiod.istio-system.svc.cluster.local"},
		notLocal: []string{"istiod.istio-control.svc.cluster.local"},
	}, {
		name: "discoveryAddress and serviceSettings",
		file: write("mesh.yaml", `
defaultConfig:
  discoveryAddress: istiod-canary.istio-system.svc:15012
serviceSettings:
- settings: {clusterLocal: true}
  hosts: ["*.ns1.svc.cluster.local"]
- settings: {clusterLocal: false}
  hosts: [kubernetes.default.svc.cluster.local]
`),
		extra:    []string{"api.example.com"},
		local:    []string{"istiod-canary.istio-system.svc.cluster.local", "foo.ns1.svc.cluster.local", "api.example.com", "dns.kube-system.svc.cluster.local"},
		notLocal: []string{"istiod.istio-system.svc.cluster.local", "kubernetes.default.svc.cluster.local", "foo.ns2.svc.cluster.local"},
	}, {
		name: "an invalid discovery address",
		file: write("bad.yaml", "defaultConfig: {discoveryAddress: istiod.istio-system.svc}\n"),
		err:  "bad.yaml",
	}, {
		name: "not YAML of a mesh config",
		file: write("junk.yaml", "serviceSettings: 3\n"),
		err:  "junk.yaml",
	}, {
		name: "a missing file",
		file: filepath.Join(dir, "missing.yaml"),
		err:  "--mesh-config",
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			o := &serveOptions{meshConfig: tc.file}
			o.cfg.SystemNamespace = tc.systemNS
			o.cfg.ClusterLocalHosts = tc.extra
			err := readMeshConfig(o)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want one naming %q", err, tc.err)
			}
			cfg := o.cfg.WithDefaults()
			for _, h := range tc.local {
				if !cfg.IsClusterLocal(h) {
					t.Errorf("%s is not cluster-local", h)
				}
			}
			for _, h := range tc.notLocal {
				if cfg.IsClusterLocal(h) {
					t.Errorf("%s is cluster-local", h)
				}
			}
		})
	}
}

// TestXDSLimitsDurationFlags: a duration flag whose 0 turns its limit off gives -1 for 0, itself
// when positive, and an error naming the flag when negative.
func TestXDSLimitsDurationFlags(t *testing.T) {
	for _, tc := range []struct {
		name                string
		sendTimeout, stale  time.Duration
		wantSend, wantStale time.Duration
		wantErr             string
	}{
		{name: "positive", sendTimeout: 3 * time.Second, stale: time.Minute, wantSend: 3 * time.Second, wantStale: time.Minute},
		{name: "zero turns off", wantSend: -1, wantStale: -1},
		{name: "negative send timeout", sendTimeout: -time.Second, stale: time.Minute, wantErr: "--xds-send-timeout"},
		{name: "negative stale threshold", sendTimeout: time.Second, stale: -time.Second, wantErr: "--stale-threshold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := &serveOptions{responseBytes: "1Mi", sendTimeout: tc.sendTimeout, staleAfter: tc.stale}
			o.limits.StreamsPerIdentity = 1
			l, err := xdsLimits(o, 0)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one naming %s", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if l.SendTimeout != tc.wantSend || l.StaleAfter != tc.wantStale {
				t.Fatalf("send timeout %v, stale after %v; want %v, %v", l.SendTimeout, l.StaleAfter, tc.wantSend, tc.wantStale)
			}
		})
	}
}
