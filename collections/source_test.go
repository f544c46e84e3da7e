package collections_test

import (
	"os"
	"path/filepath"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/krteds/krteds/collections"
)

func write(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

const nsA = "apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n"
const svc1 = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a}\nspec: {ports: [{name: http, port: 80}]}\n"
const svc2 = "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a}\nspec: {ports: [{name: http, port: 81}]}\n"

func TestManifestSourceAppliesDifferences(t *testing.T) {
	dir := t.TempDir()
	write(t, filepath.Join(dir, "ns.yaml"), nsA)
	write(t, filepath.Join(dir, "svc.yaml"), svc1)
	src, errs, err := collections.NewManifestSource(dir)
	if err != nil || len(errs) > 0 {
		t.Fatal(err, errs)
	}
	check := func(want collections.ReloadStats) {
		t.Helper()
		st, errs, err := src.Reload() // first look: the change is seen
		if err != nil || len(errs) > 0 {
			t.Fatal(err, errs)
		}
		if st.Changed() {
			t.Fatalf("a changed file must settle for one reload before it is applied: %+v", st)
		}
		st, errs, err = src.Reload()
		if err != nil || len(errs) > 0 {
			t.Fatal(err, errs)
		}
		if st != want {
			t.Fatalf("reload %+v, want %+v", st, want)
		}
	}
	svc := func() (int32, bool) {
		s, err := src.Client().Kube().CoreV1().Services("a").Get(t.Context(), "s", metav1.GetOptions{})
		if err != nil {
			return 0, false
		}
		return s.Spec.Ports[0].Port, true
	}
	if p, ok := svc(); !ok || p != 80 {
		t.Fatalf("initial service: %d %v", p, ok)
	}
	write(t, filepath.Join(dir, "svc.yaml"), svc2+"\n")
	check(collections.ReloadStats{Updated: 1})
	if p, _ := svc(); p != 81 {
		t.Fatalf("service not updated: %d", p)
	}
	// A broken edit keeps what the file defined.
	write(t, filepath.Join(dir, "svc.yaml"), "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a\n")
	if _, _, err := src.Reload(); err != nil {
		t.Fatal(err)
	}
	st, errs, _ := src.Reload()
	if len(errs) == 0 || st.Changed() {
		t.Fatalf("broken file: stats %+v errors %v", st, errs)
	}
	if _, ok := svc(); !ok {
		t.Fatal("a broken edit deleted the service")
	}
	if err := os.Remove(filepath.Join(dir, "svc.yaml")); err != nil {
		t.Fatal(err)
	}
	st, _, _ = src.Reload()
	if st != (collections.ReloadStats{Deleted: 1}) {
		t.Fatalf("delete: %+v", st)
	}
	if _, ok := svc(); ok {
		t.Fatal("service not deleted")
	}
	write(t, filepath.Join(dir, "more.yml"), svc1)
	check(collections.ReloadStats{Created: 1})
}
