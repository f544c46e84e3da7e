package sources

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cespare/xxhash/v2"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	securityclient "istio.io/client-go/pkg/apis/security/v1"
	"istio.io/istio/pkg/kube"
	corev1 "k8s.io/api/core/v1"
	discovery "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	"github.com/krteds/krteds/collections"
)

// Kind is one kind of object krteds reads. The order of the constants is the order in which
// changes are applied: what other objects refer to comes first, so that an EndpointSlice
// arriving with its Pods finds them; deletions go the other way.
type Kind int

const (
	KindNamespace Kind = iota
	KindNode
	KindService
	KindPod
	KindDestinationRule
	KindSidecar
	KindServiceEntry
	KindWorkloadEntry
	KindPeerAuthentication
	KindEndpointSlice
	numKinds
)

var kindNames = [numKinds]string{"Namespace", "Node", "Service", "Pod", "DestinationRule", "Sidecar", "ServiceEntry", "WorkloadEntry", "PeerAuthentication", "EndpointSlice"}

func (k Kind) String() string {
	if k >= 0 && k < numKinds {
		return kindNames[k]
	}
	return "Unknown"
}

// clusterScoped reports whether objects of the kind have no namespace.
func (k Kind) clusterScoped() bool { return k == KindNamespace || k == KindNode }

// Object is one decoded object krteds reads, with where it came from.
type Object struct {
	// Key is "<Kind>/<namespace>/<name>" ("<Kind>/<name>" for cluster-scoped kinds).
	Key  string
	Kind Kind
	// Obj is the typed object (*corev1.Service, ...), already transformed as the informers
	// transform it (Nodes stripped of the fields krteds does not read, Pods reduced to a
	// collections.Pod).
	Obj any
	// Hash identifies the document the object was decoded from; equal hashes mean equal objects.
	Hash uint64
	// Doc is the index of the document in its file (and the item index inside a List).
	Doc string
}

// Decoded is the result of decoding one file.
type Decoded struct {
	Objects []Object
	// Ignored counts the objects of kinds krteds does not read, by kind.
	Ignored map[string]int
	// Duplicates name objects defined more than once in the file (the later document wins).
	Duplicates []string
	// ModTime is when the file was last written (unix ns; the files source sets it): the trigger
	// time of the slices it defines without one.
	ModTime int64
}

// maxListDepth bounds Lists nested in Lists.
const maxListDepth = 4

// decodeCache maps document hashes to what they decoded to, so that rewriting a file decodes
// only the documents that changed.
type decodeCache map[uint64][]Object

// Decode decodes a multi-document YAML (or JSON) stream. It fails as a whole when any document
// fails: a file is applied whole or not at all. Lists (kind List, as kubectl get -o yaml writes
// them) are flattened. cache (may be nil) supplies the objects of documents decoded before.
func Decode(data []byte, cache decodeCache) (Decoded, error) {
	var out Decoded
	seen := map[string]int{}
	var in io.Reader = bytes.NewReader(data)
	if !bytes.HasSuffix(data, []byte{'\n'}) {
		// The YAML reader drops a last line that has no newline when its length is a multiple
		// of its buffer's: a one-line JSON file of 64 KiB would decode to nothing.
		in = io.MultiReader(in, bytes.NewReader([]byte{'\n'}))
	}
	r := utilyaml.NewYAMLReader(bufio.NewReaderSize(in, 64<<10))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Decoded{}, fmt.Errorf("document %d: reading YAML: %w", i, err)
		}
		if isBlank(doc) {
			continue
		}
		h := xxhash.Sum64(doc)
		objs, ok := cache[h]
		if !ok {
			var ignored map[string]int
			objs, ignored, err = decodeDoc(doc, h, fmt.Sprint(i), 0)
			if err != nil {
				return Decoded{}, fmt.Errorf("document %d: %w", i, err)
			}
			for k, n := range ignored {
				if out.Ignored == nil {
					out.Ignored = map[string]int{}
				}
				out.Ignored[k] += n
			}
		}
		for _, o := range objs {
			if j, dup := seen[o.Key]; dup {
				out.Duplicates = append(out.Duplicates, o.Key)
				out.Objects[j] = o
				continue
			}
			seen[o.Key] = len(out.Objects)
			out.Objects = append(out.Objects, o)
		}
	}
	return out, nil
}

// Cache returns the decode cache of a decoded file.
func (d Decoded) cache() decodeCache {
	c := make(decodeCache, len(d.Objects))
	for _, o := range d.Objects {
		c[o.Hash] = append(c[o.Hash], o)
	}
	return c
}

// isBlank reports whether a document holds only whitespace, comments and document markers.
func isBlank(doc []byte) bool {
	for line := range bytes.Lines(doc) {
		t := bytes.TrimSpace(line)
		if len(t) > 0 && t[0] != '#' && !bytes.Equal(t, []byte("---")) && !bytes.Equal(t, []byte("...")) {
			return false
		}
	}
	return true
}

var deserializer = kube.IstioCodec.UniversalDeserializer()

func decodeDoc(doc []byte, h uint64, where string, depth int) ([]Object, map[string]int, error) {
	if j, ok := fastYAMLToJSON(doc); ok {
		doc = j
	}
	obj, gvk, err := deserializer.Decode(doc, nil, nil)
	if err != nil {
		return nil, nil, err
	}
	var items []runtime.RawExtension
	switch l := obj.(type) {
	case *metav1.List:
		items = l.Items
	case *corev1.List:
		items = l.Items
	default:
		o, ok, err := classify(obj, h, where)
		if err != nil {
			return nil, nil, err
		}
		if !ok {
			return nil, map[string]int{gvk.Kind: 1}, nil
		}
		if o.Obj == nil {
			return nil, nil, nil // a Failed Pod: absent, as the informers filter it
		}
		return []Object{o}, nil, nil
	}
	if depth >= maxListDepth {
		return nil, nil, fmt.Errorf("Lists nested more than %d deep", maxListDepth)
	}
	var out []Object
	var ignored map[string]int
	for j, item := range items {
		raw := item.Raw
		if len(raw) == 0 {
			return nil, nil, fmt.Errorf("List item %d is empty", j)
		}
		objs, ign, err := decodeDoc(raw, xxhash.Sum64(raw)^h, fmt.Sprintf("%s item %d", where, j), depth+1)
		if err != nil {
			return nil, nil, fmt.Errorf("List item %d: %w", j, err)
		}
		out = append(out, objs...)
		for k, n := range ign {
			if ignored == nil {
				ignored = map[string]int{}
			}
			ignored[k] += n
		}
	}
	return out, ignored, nil
}

// classify turns a decoded object into an Object when krteds reads its kind (ok false
// otherwise). Objects of namespaced kinds without a namespace are in "default", as kubectl
// apply would put them. A Failed Pod gives an Object with a nil Obj.
func classify(obj runtime.Object, h uint64, where string) (Object, bool, error) {
	if n, isNode := obj.(*corev1.Node); isNode {
		if _, err := kube.StripNodeUnusedFields(n); err != nil {
			return Object{}, false, err
		}
	}
	m, isMeta := obj.(metav1.Object)
	if isMeta {
		// Before the object is reduced (kindOf), so that its reduced form has the namespace too.
		switch obj.(type) {
		case *corev1.Namespace, *corev1.Node:
			m.SetNamespace("")
		default:
			if m.GetNamespace() == "" {
				m.SetNamespace(metav1.NamespaceDefault)
			}
		}
	}
	kind, kept, ok := kindOf(obj)
	if !ok {
		return Object{}, false, nil
	}
	if !isMeta || m.GetName() == "" {
		return Object{}, false, fmt.Errorf("%s has no metadata.name", kind)
	}
	key := kind.String() + "/" + m.GetName()
	if !kind.clusterScoped() {
		key = kind.String() + "/" + m.GetNamespace() + "/" + m.GetName()
	}
	return Object{Key: key, Kind: kind, Obj: kept, Hash: h, Doc: where}, true, nil
}

// kindOf is the kind of an input object krteds reads, and the object as every source keeps it: a
// Kubernetes Pod reduced to a collections.Pod (nil when it is Failed: no source holds it), an
// EndpointSlice to a collections.Slice; the reduced forms are of their kinds too. ok is false
// for any other type.
func kindOf(obj any) (kind Kind, kept any, ok bool) {
	switch o := obj.(type) {
	case *corev1.Namespace:
		return KindNamespace, o, true
	case *corev1.Node:
		return KindNode, o, true
	case *corev1.Service:
		return KindService, o, true
	case *corev1.Pod:
		if p := collections.NewPod(o); p != nil {
			return KindPod, p, true
		}
		return KindPod, nil, true
	case *collections.Pod:
		return KindPod, o, true
	case *discovery.EndpointSlice:
		return KindEndpointSlice, collections.NewSlice(o), true
	case *collections.Slice:
		return KindEndpointSlice, o, true
	case *networkingclient.DestinationRule:
		return KindDestinationRule, o, true
	case *networkingclient.Sidecar:
		return KindSidecar, o, true
	case *networkingclient.ServiceEntry:
		return KindServiceEntry, o, true
	case *networkingclient.WorkloadEntry:
		return KindWorkloadEntry, o, true
	case *securityclient.PeerAuthentication:
		return KindPeerAuthentication, o, true
	}
	return 0, nil, false
}
