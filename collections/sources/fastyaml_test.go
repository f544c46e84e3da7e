package sources

import (
	"bytes"
	"encoding/json"
	"fmt"
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
	// Deep: at the fast reader's bound and past it, and past the general parser's.
	for _, depth := range []int{maxFastDepth, maxFastDepth + 1, 20000} {
		f.Add([]byte("a: " + strings.Repeat("[", depth-1) + "1" + strings.Repeat("]", depth-1) + "\n"))
		f.Add([]byte("a: " + strings.Repeat("{b: ", depth-1) + "1" + strings.Repeat("}", depth-1) + "\n"))
		f.Add([]byte(strings.Repeat("- ", depth) + "x\n"))
	}
	var block bytes.Buffer
	for i := range maxFastDepth + 1 {
		block.WriteString(strings.Repeat(" ", i) + "k:\n")
	}
	f.Add(block.Bytes())
	// Wide: past the size at which the duplicate check takes a map, with and without a duplicate.
	for _, flow := range []bool{false, true} {
		wide := wideMapping(4*smallMapping, flow)
		f.Add(wide)
		f.Add(bytes.Replace(wide, fmt.Appendf(nil, "k%d: v%d", 3*smallMapping, 3*smallMapping), []byte("k1: v1"), 1))
	}
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

// wideMapping is a document whose mapping has n keys, in block or flow style.
func wideMapping(n int, flow bool) []byte {
	var b bytes.Buffer
	b.WriteString("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: wide}\ndata:")
	if flow {
		b.WriteString(" {")
		for i := range n {
			if i > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "k%d: v%d", i, i)
		}
		b.WriteString("}\n")
		return b.Bytes()
	}
	b.WriteString("\n")
	for i := range n {
		fmt.Fprintf(&b, "  k%d: v%d\n", i, i)
	}
	return b.Bytes()
}

// TestFastYAMLDuplicateCheckIsLinear: the duplicate-key check of a mapping costs a bounded
// number of comparisons per key, however wide the mapping, and still finds a duplicate.
func TestFastYAMLDuplicateCheckIsLinear(t *testing.T) {
	for _, flow := range []bool{false, true} {
		for _, n := range []int{10, 1000, 20000} {
			doc := wideMapping(n, flow)
			var c yconv
			if !c.convert(doc) {
				t.Fatalf("flow %v, %d keys: the fast reader refused a plain mapping", flow, n)
			}
			// A linear scan of the first keys, one look-up per key after.
			if limit := 2*n + smallMapping*smallMapping; c.compared > limit {
				t.Errorf("flow %v, %d keys: %d key comparisons, want at most %d", flow, n, c.compared, limit)
			}
			if n <= 1000 {
				sameAsGeneral(t, doc)
			}
			// The first key again, last: a duplicate, which the fast reader leaves to go-yaml.
			dup := bytes.Replace(doc, fmt.Appendf(nil, "k%d: v%d", n-1, n-1), []byte("k0: again"), 1)
			if _, ok := fastYAMLToJSON(dup); ok {
				t.Errorf("flow %v, %d keys: a duplicate key was not seen", flow, n)
			}
		}
	}
}

// BenchmarkFastYAMLWide converts mappings of more and more keys: the time per key stays flat.
func BenchmarkFastYAMLWide(b *testing.B) {
	for _, flow := range []bool{false, true} {
		for _, n := range []int{1000, 10000, 40000, 100000} {
			doc := wideMapping(n, flow)
			b.Run(fmt.Sprintf("flow=%v/keys=%d", flow, n), func(b *testing.B) {
				b.SetBytes(int64(len(doc)))
				for b.Loop() {
					if _, ok := fastYAMLToJSON(doc); !ok {
						b.Fatal("refused")
					}
				}
			})
		}
	}
}

// deepDocs are documents nested far deeper than any manifest: the fast reader must not follow
// them (a stack overflow is fatal in Go) and the general parser rejects them.
func deepDocs() map[string][]byte {
	var block bytes.Buffer
	for i := range 11000 { // about 60 MB: the indents add up
		block.WriteString(strings.Repeat(" ", i) + "a:\n")
	}
	var seqBlock bytes.Buffer
	for i := range 11000 {
		seqBlock.WriteString(strings.Repeat(" ", i) + "-\n")
	}
	return map[string][]byte{
		"flow sequences":             []byte("a: " + strings.Repeat("[", 4<<20)),
		"flow mapping braces":        []byte("a: " + strings.Repeat("{", 4<<20)),
		"flow mappings with keys":    []byte("a: " + strings.Repeat("{a: ", 1<<20)),
		"closed flow sequences":      []byte("a: " + strings.Repeat("[", 1<<20) + strings.Repeat("]", 1<<20) + "\n"),
		"block sequences on a line":  []byte(strings.Repeat("- ", 2<<20) + "x\n"),
		"block mappings":             block.Bytes(),
		"block sequences":            seqBlock.Bytes(),
		"JSON objects":               []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"},"spec":` + strings.Repeat(`{"a":`, 1<<20) + "1" + strings.Repeat("}", 1<<20) + "}"),
		"JSON arrays":                []byte(strings.Repeat("[", 4<<20)),
		"JSON arrays under a kind":   []byte(`{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","x":` + strings.Repeat("[", 4<<20)),
		"flow in block sequence":     []byte("- " + strings.Repeat("[", 4<<20)),
		"mixed block and flow depth": []byte("a:\n  b:\n    - c: " + strings.Repeat("[{d: ", 1<<20)),
	}
}

// TestFastYAMLDeepNestingFallsBack: past a bound the fast reader gives up on nesting, however
// deep, in block and flow collections alike; up to the bound it answers as the parser does.
func TestFastYAMLDeepNestingFallsBack(t *testing.T) {
	for name, doc := range deepDocs() {
		if _, ok := fastYAMLToJSON(doc); ok {
			t.Errorf("%s: the fast reader accepted a document nested millions deep", name)
		}
	}
	nested := func(depth int) []byte {
		return []byte("a: " + strings.Repeat("[", depth-1) + "1" + strings.Repeat("]", depth-1) + "\n")
	}
	if !sameAsGeneral(t, nested(maxFastDepth)) {
		t.Errorf("a document nested %d deep takes the slow path", maxFastDepth)
	}
	if _, ok := fastYAMLToJSON(nested(maxFastDepth + 1)); ok {
		t.Errorf("a document nested %d deep took the fast path", maxFastDepth+1)
	}
}
