package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

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

// TestREADMEListsEveryServeFlag: the README's table of krteds serve's flags names every flag the
// command has, and no other.
func TestREADMEListsEveryServeFlag(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	start := strings.Index(text, "| flag | default | meaning |")
	if start < 0 {
		t.Fatal("the README has no flag table")
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
			t.Errorf("--%s is not in the README's table", f.Name)
		}
		delete(documented, "--"+f.Name)
	})
	for f := range documented {
		t.Errorf("the README lists %s, which krteds serve does not have", f)
	}
}
