package sources

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// sameAsGeneral checks one document: where the fast reader answers, it answers what the general
// parser does.
func sameAsGeneral(t *testing.T, doc []byte) (fast bool) {
	t.Helper()
	got, ok := fastYAMLToJSON(doc)
	if !ok {
		return false
	}
	want, err := yaml.YAMLToJSON(doc)
	if err != nil {
		t.Fatalf("the fast reader accepted what the YAML parser rejects (%v):\n%s\nfast: %s", err, doc, got)
	}
	if !sameJSON(t, got, want) {
		t.Fatalf("the fast reader differs from the YAML parser:\n%s\nfast:    %s\ngeneral: %s", doc, got, want)
	}
	return true
}

func sameJSON(t *testing.T, a, b []byte) bool {
	t.Helper()
	decode := func(b []byte) any {
		d := json.NewDecoder(bytes.NewReader(b))
		d.UseNumber()
		var v any
		if err := d.Decode(&v); err != nil {
			t.Fatalf("invalid JSON %s: %v", b, err)
		}
		return v
	}
	return reflect.DeepEqual(decode(a), decode(b))
}

// manifestDocs are the documents of the bundled examples and of objects written by
// sigs.k8s.io/yaml (what kubectl get -o yaml writes).
func manifestDocs(t testing.TB) [][]byte {
	var docs [][]byte
	files, _ := filepath.Glob(filepath.Join("..", "..", "examples", "*", "*.yaml"))
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range strings.Split(string(b), "\n---\n") {
			docs = append(docs, []byte(d))
		}
	}
	pod := &corev1.Pod{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "x", Labels: map[string]string{"app": "a", "version": "v1"},
			Annotations: map[string]string{"note": "has: colon", "empty": "", "yes": "no", "num": "0777"}},
		Spec:   corev1.PodSpec{NodeName: "n1", Containers: []corev1.Container{{Name: "c", Image: "i:1", Args: []string{"-v", "--x=1", "a b"}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.1", PodIPs: []corev1.PodIP{{IP: "10.0.0.1"}}}}
	y, err := yaml.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return append(docs, y)
}

func TestFastYAMLMatchesTheYAMLParser(t *testing.T) {
	fast := 0
	for _, d := range manifestDocs(t) {
		if isBlank(d) {
			continue
		}
		if sameAsGeneral(t, d) {
			fast++
		} else {
			t.Errorf("a plain manifest takes the slow path:\n%s", d)
		}
	}
	if fast == 0 {
		t.Fatal("no document took the fast path")
	}
	for _, d := range []string{
		"a: yes\nb: No\nc: ~\nd:\ne: 'it''s'\nf: \"q\\\"x\\u00e9\"\ng: -1\nh: 0\ni: -foo\n",
		"list:\n- a\n- b: 1\n  c: [x, 'y', {z: 2}]\n-\n- - nested\n",
		"k:\n  - 1\n  - {a: b, c: ~}\nz: {}\nw: []\n",
		"key: value # comment\n# full comment\nother: 'with # hash'\n",
		"a: 1.5\n", "a: 0x10\n", "a: 2020-01-01\n", "a: &x 1\nb: *x\n", "a: |\n  text\n", "a: b\n  c\n",
		"a: 1\na: 2\n", "yes: 1\n", "80: x\n", "a: !!str 1\n", "a: [1, 2,]\n", "a: {b}\n", "- a\n- b\n", "plain\n",
		"a: 'x\n", "a: b: c\n", "a:\tb\n", "a: \"\\x41\"\n", "? a\n: b\n", "a: -\n", "a: .inf\n", "a: +1\n", "a: 00\n",
	} {
		sameAsGeneral(t, []byte(d))
	}
}

func FuzzFastYAML(f *testing.F) {
	for _, d := range manifestDocs(f) {
		f.Add(d)
	}
	f.Add([]byte("a: {b: [1, 'two', \"three\"], c: ~}\nd:\n- e: f\n  g: -h\n"))
	f.Fuzz(func(t *testing.T, doc []byte) {
		sameAsGeneral(t, doc)
	})
}

// BenchmarkDecodePod compares the general YAML path with the fast reader on a typical Pod.
func BenchmarkDecodePod(b *testing.B) {
	doc := manifestDocs(b)
	var pod []byte
	for _, d := range doc {
		if bytes.Contains(d, []byte("kind: Pod")) && !bytes.Contains(d, []byte("# ")) {
			pod = d
			break
		}
	}
	b.Run("yaml", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := deserializer.Decode(pod, nil, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, _, err := decodeDoc(pod, 0, "", 0); err != nil {
				b.Fatal(err)
			}
		}
	})
}
