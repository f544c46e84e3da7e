package sources

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
)

func keys(d Decoded) []string {
	var out []string
	for _, o := range d.Objects {
		out = append(out, o.Key)
	}
	return out
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		want      []string
		ignored   map[string]int
		dups      []string
		wantError string
	}{
		{
			name: "documents, comments and blank documents",
			in:   "# header\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n---\n# only a comment\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a}\n",
			want: []string{"Namespace/a", "Service/a/s"},
		},
		{
			name: "a namespaced object without a namespace is in default",
			in:   "apiVersion: v1\nkind: Service\nmetadata: {name: s}\n",
			want: []string{"Service/default/s"},
		},
		{
			name: "a namespace on a cluster-scoped object is dropped",
			in:   "apiVersion: v1\nkind: Node\nmetadata: {name: node1, namespace: x}\n",
			want: []string{"Node/node1"},
		},
		{
			name: "kind List, as kubectl get -o yaml writes it, is flattened",
			in: `apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: a, namespace: x}
- apiVersion: v1
  kind: Pod
  metadata: {name: p, namespace: x}
- apiVersion: apps/v1
  kind: Deployment
  metadata: {name: d, namespace: x}
metadata: {resourceVersion: ""}
`,
			want:    []string{"Service/x/a", "Pod/x/p"},
			ignored: map[string]int{"Deployment": 1},
		},
		{
			name: "JSON",
			in:   `{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p","namespace":"x"}}`,
			want: []string{"Pod/x/p"},
		},
		{
			name: "a Failed pod is absent, as the informers filter it",
			in:   "apiVersion: v1\nkind: Pod\nmetadata: {name: p, namespace: x}\nstatus: {phase: Failed}\n",
		},
		{
			name: "the later of two documents defining one object wins",
			in:   "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a, labels: {v: '1'}}\n---\napiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: a, labels: {v: '2'}}\n",
			want: []string{"Service/a/s"},
			dups: []string{"Service/a/s"},
		},
		{
			name: "Istio kinds",
			in:   "apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: a}\nspec: {host: x}\n---\napiVersion: networking.istio.io/v1\nkind: Sidecar\nmetadata: {name: s, namespace: a}\nspec: {egress: [{hosts: ['./*']}]}\n",
			want: []string{"DestinationRule/a/d", "Sidecar/a/s"},
		},
		{
			// security.istio.io/v1 is read, as the informers read it; an older version is not.
			name: "PeerAuthentications",
			in: "apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p}\nspec: {selector: {matchLabels: {app: a}}, mtls: {mode: STRICT}, portLevelMtls: {8080: {mode: DISABLE}}}\n" +
				"---\napiVersion: security.istio.io/v1beta1\nkind: PeerAuthentication\nmetadata: {name: old, namespace: a}\nspec: {mtls: {mode: DISABLE}}\n",
			want:    []string{"PeerAuthentication/default/p"},
			ignored: map[string]int{"PeerAuthentication": 1},
		},
		{
			name:      "one bad document fails the whole file",
			in:        "apiVersion: v1\nkind: Namespace\nmetadata: {name: ok}\n---\n{not yaml: [\n",
			wantError: "document 1",
		},
		{
			name:      "an object without a name",
			in:        "apiVersion: v1\nkind: Service\nmetadata: {namespace: a}\n",
			wantError: "no metadata.name",
		},
		{
			name:      "an unknown API version",
			in:        "apiVersion: v9\nkind: Nope\nmetadata: {name: a}\n",
			wantError: "document 0",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Decode([]byte(tc.in), nil)
			if tc.wantError != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantError) {
					t.Fatalf("want an error with %q, got %v (%v)", tc.wantError, err, keys(d))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := keys(d); !slices.Equal(got, tc.want) {
				t.Errorf("objects %v, want %v", got, tc.want)
			}
			if len(tc.ignored) > 0 || len(d.Ignored) > 0 {
				if !equalCounts(d.Ignored, tc.ignored) {
					t.Errorf("ignored %v, want %v", d.Ignored, tc.ignored)
				}
			}
			if !slices.Equal(d.Duplicates, tc.dups) {
				t.Errorf("duplicates %v, want %v", d.Duplicates, tc.dups)
			}
		})
	}
}

func equalCounts(a, b map[string]int) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestDecodeReducesPodsAsTheInformersDo(t *testing.T) {
	d, err := Decode([]byte(`apiVersion: v1
kind: Pod
metadata:
  name: p
  namespace: x
  managedFields: [{manager: kubectl}]
  annotations: {kubectl.kubernetes.io/last-applied-configuration: "{}"}
spec:
  nodeName: n1
  containers: [{name: c, image: i, env: [{name: A, value: b}]}]
status: {phase: Running, podIP: 10.0.0.1}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	p, ok := d.Objects[0].Obj.(*collections.Pod)
	if !ok || p.Key != "x/p" || p.NodeName != "n1" || !slices.Equal(p.IPs, []string{"10.0.0.1"}) || p.Phase != corev1.PodRunning {
		t.Fatalf("pod not reduced like the informer's: %#v", d.Objects[0].Obj)
	}
}

func TestDecodeReusesUnchangedDocuments(t *testing.T) {
	first, err := Decode([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n"), nil)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Decode([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: c}\n"), first.cache())
	if err != nil {
		t.Fatal(err)
	}
	if first.Objects[0].Obj != second.Objects[0].Obj {
		t.Error("an unchanged document was decoded again")
	}
	if second.Objects[1].Key != "Namespace/c" {
		t.Errorf("changed document: %v", keys(second))
	}
}

func FuzzDecode(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems: []\n"))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: a}\nspec: {host: x}\n"))
	f.Add([]byte("apiVersion: security.istio.io/v1\nkind: PeerAuthentication\nmetadata: {name: p, namespace: a}\nspec: {selector: {matchLabels: {app: x}}, portLevelMtls: {8080: {mode: DISABLE}}}\n"))
	f.Add([]byte("---\n---\n# only a comment\n"))
	f.Add([]byte("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}"))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems: [{apiVersion: v1, kind: List, items: [{apiVersion: v1, kind: Pod, metadata: {name: p}}]}]\n"))
	// Deep, past the fast reader's bound and the general parser's, in YAML and JSON.
	for _, depth := range []int{maxFastDepth + 1, 20000} {
		f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a, x: " + strings.Repeat("[", depth) + strings.Repeat("]", depth) + "}\n"))
		f.Add([]byte(`{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a","x":` + strings.Repeat(`{"a":`, depth) + "1" + strings.Repeat("}", depth) + "}}"))
	}
	// Wide: many labels (one of them twice), many documents, a long List.
	var labels, docs, list strings.Builder
	for i := range 4 * smallMapping {
		fmt.Fprintf(&labels, "    l%d: v\n", i)
		fmt.Fprintf(&docs, "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: n%d}\n", i)
		fmt.Fprintf(&list, "- {apiVersion: v1, kind: Namespace, metadata: {name: n%d}}\n", i)
	}
	wide := "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  labels:\n" + labels.String()
	f.Add([]byte(wide))
	f.Add([]byte(wide + "    l1: again\n"))
	f.Add([]byte(docs.String()))
	f.Add([]byte("apiVersion: v1\nkind: List\nitems:\n" + list.String()))
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Decode(data, nil)
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, o := range d.Objects {
			if o.Obj == nil || o.Key == "" {
				t.Fatalf("object without content or key: %+v", o)
			}
			if seen[o.Key] {
				t.Fatalf("key %s twice in one file's objects", o.Key)
			}
			seen[o.Key] = true
		}
		// Decoding again through the cache gives the same objects.
		again, err := Decode(data, d.cache())
		if err != nil || !slices.Equal(keys(again), keys(d)) {
			t.Fatalf("decoding through the cache: %v, %v vs %v", err, keys(again), keys(d))
		}
	})
}

// TestDecodeDeepNestingIsAnError: a document nested millions deep, in YAML or JSON, block or
// flow, is an error of the general parser's (it bounds depth at 10000), not a crash.
func TestDecodeDeepNestingIsAnError(t *testing.T) {
	for name, doc := range deepDocs() {
		_, err := Decode(doc, nil)
		if err == nil || !strings.Contains(err.Error(), "document 0") || !strings.Contains(err.Error(), "max depth") {
			t.Errorf("%s: %.300v", name, err)
		}
	}
}

// TestDecodeLastLineOfWholeBuffers: a file whose last line has no newline is read whole, whatever
// its length (the YAML reader dropped one whose length is a multiple of its 64 KiB buffer).
func TestDecodeLastLineOfWholeBuffers(t *testing.T) {
	head := `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a","labels":{"x":"`
	for _, n := range []int{65535, 65536, 65537, 4 << 16} {
		doc := head + strings.Repeat("y", n-len(head)-4) + `"}}}`
		for _, data := range []string{doc, doc + "\n", "apiVersion: v1\nkind: Namespace\nmetadata: {name: b}\n---\n" + doc} {
			d, err := Decode([]byte(data), nil)
			if err != nil {
				t.Fatalf("%d bytes: %v", len(data), err)
			}
			if got := keys(d); !slices.Contains(got, "Namespace/a") {
				t.Errorf("%d bytes, last line of %d: objects %v, want Namespace/a", len(data), len(doc), got)
			}
		}
	}
}

// BenchmarkDecodeWide decodes files growing in one direction: many documents, a List of many
// items, a mapping of many keys the fast reader leaves to the general parser (a block scalar
// among them), and one very long line. The time per byte stays flat.
func BenchmarkDecodeWide(b *testing.B) {
	shapes := map[string]func(n int) string{
		"documents": func(n int) string {
			var s strings.Builder
			for i := range n {
				fmt.Fprintf(&s, "---\napiVersion: v1\nkind: Namespace\nmetadata: {name: n%d}\n", i)
			}
			return s.String()
		},
		"list": func(n int) string {
			var s strings.Builder
			s.WriteString("apiVersion: v1\nkind: List\nitems:\n")
			for i := range n {
				fmt.Fprintf(&s, "- {apiVersion: v1, kind: Namespace, metadata: {name: n%d}}\n", i)
			}
			return s.String()
		},
		"general-keys": func(n int) string {
			var s strings.Builder
			s.WriteString("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: a\n  annotations:\n    f: |\n      text\n")
			for i := range n {
				fmt.Fprintf(&s, "    k%d: v\n", i)
			}
			return s.String()
		},
		"line": func(n int) string {
			return `{"apiVersion":"v1","kind":"Namespace","metadata":{"name":"a","annotations":{"a":"` + strings.Repeat("x", 64*n) + `"}}}`
		},
	}
	for _, name := range slices.Sorted(maps.Keys(shapes)) {
		for _, n := range []int{1000, 10000, 100000} {
			data := []byte(shapes[name](n))
			b.Run(fmt.Sprintf("%s/n=%d", name, n), func(b *testing.B) {
				b.SetBytes(int64(len(data)))
				for b.Loop() {
					if _, err := Decode(data, nil); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
