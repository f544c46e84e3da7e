package collections

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"istio.io/istio/pkg/kube"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	metadatafake "k8s.io/client-go/metadata/fake"
)

// Manifest is one decoded object and where it came from.
type Manifest struct {
	Object runtime.Object
	// Source is "<file>#<document index>".
	Source string
}

// ManifestKey identifies an object by kind, namespace and name.
func ManifestKey(o runtime.Object) string {
	m, ok := o.(metav1.Object)
	if !ok {
		return o.GetObjectKind().GroupVersionKind().Kind
	}
	return fmt.Sprintf("%T/%s/%s", o, m.GetNamespace(), m.GetName())
}

// maxManifestBytes bounds one manifest file; larger files are rejected rather than read.
const maxManifestBytes = 64 << 20

// LoadManifests reads every *.yaml / *.yml / *.json file at path (a file, or a folder walked
// recursively) and decodes each document. A document that cannot be decoded is returned as an
// error for that document and does not stop the others; an unreadable path is an error.
// Objects are returned in file-name order, then document order.
func LoadManifests(path string) ([]Manifest, []error, error) {
	files, err := manifestFiles(path)
	if err != nil {
		return nil, nil, err
	}
	var out []Manifest
	var docErrs []error
	for _, f := range files {
		data, err := readBounded(f)
		if err != nil {
			docErrs = append(docErrs, err)
			continue
		}
		objs, errs := DecodeManifests(data, f)
		out = append(out, objs...)
		docErrs = append(docErrs, errs...)
	}
	return out, docErrs, nil
}

func readBounded(f string) ([]byte, error) {
	fh, err := os.Open(f)
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", f, err)
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxManifestBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading manifest %s: %w", f, err)
	}
	if len(data) > maxManifestBytes {
		return nil, fmt.Errorf("manifest %s is larger than %d bytes", f, maxManifestBytes)
	}
	return data, nil
}

func manifestFiles(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("manifests: %w", err)
	}
	if !st.IsDir() {
		return []string{path}, nil
	}
	var files []string
	err = filepath.WalkDir(path, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != path && strings.HasPrefix(d.Name(), ".") {
				return filepath.SkipDir
			}
			return nil
		}
		switch strings.ToLower(filepath.Ext(p)) {
		case ".yaml", ".yml", ".json":
			if !strings.HasPrefix(d.Name(), ".") {
				files = append(files, p)
			}
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("manifests: walking %s: %w", path, err)
	}
	slices.Sort(files)
	return files, nil
}

// DecodeManifests decodes a multi-document YAML (or JSON) stream of Kubernetes objects. Lists
// (kind: List) are flattened. Each document that fails to decode yields one error naming source
// and document index; the rest are still returned.
func DecodeManifests(data []byte, source string) (objs []Manifest, errs []error) {
	decode := kube.IstioCodec.UniversalDeserializer().Decode
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return objs, errs
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s#%d: reading YAML: %w", source, i, err))
			return objs, errs
		}
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		src := fmt.Sprintf("%s#%d", source, i)
		obj, _, err := decode(doc, nil, nil)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			continue
		}
		if list, ok := obj.(*metav1.List); ok {
			for j, item := range list.Items {
				o, _, err := decode(item.Raw, nil, nil)
				if err != nil {
					errs = append(errs, fmt.Errorf("%s item %d: %w", src, j, err))
					continue
				}
				objs = append(objs, Manifest{Object: o, Source: fmt.Sprintf("%s item %d", src, j)})
			}
			continue
		}
		if m, ok := obj.(metav1.Object); !ok || m.GetName() == "" {
			errs = append(errs, fmt.Errorf("%s: object has no metadata.name", src))
			continue
		}
		objs = append(objs, Manifest{Object: obj, Source: src})
	}
}

func stripComments(doc []byte) []byte {
	var out []byte
	for _, line := range bytes.Split(doc, []byte("\n")) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			out = append(out, line...)
			out = append(out, '\n')
		}
	}
	return out
}

// NewManifestClient returns a fake kube client seeded with the objects (when two documents
// define the same object, the later one wins). Informers built on it behave as on a real cluster,
// so every feature works on manifests too.
func NewManifestClient(objs []Manifest) kube.CLIClient {
	c := kube.NewFakeClient(UniqueObjects(objs)...)
	InstallIstioCRDs(c)
	return c
}

// InstallIstioCRDs tells a fake client's CRD watcher that the DestinationRule and Sidecar CRDs
// exist, as they would in a cluster with Istio, so their informers run.
func InstallIstioCRDs(c kube.CLIClient) {
	fmc, ok := c.Metadata().(*metadatafake.FakeMetadataClient)
	if !ok {
		return
	}
	crds := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, g := range []schema.GroupVersionResource{GVRDestinationRule, GVRSidecar} {
		obj := &metav1.PartialObjectMetadata{
			TypeMeta:   metav1.TypeMeta{APIVersion: "apiextensions.k8s.io/v1", Kind: "CustomResourceDefinition"},
			ObjectMeta: metav1.ObjectMeta{Name: g.Resource + "." + g.Group},
		}
		if md, ok := fmc.Resource(crds).(metadatafake.MetadataClient); ok {
			_, _ = md.CreateFake(obj, metav1.CreateOptions{})
		}
	}
}

// UniqueObjects returns the objects with later duplicates (same kind, namespace, name)
// replacing earlier ones, in first-seen order.
func UniqueObjects(objs []Manifest) []runtime.Object {
	idx := map[string]int{}
	var out []runtime.Object
	for _, m := range objs {
		k := ManifestKey(m.Object)
		if i, ok := idx[k]; ok {
			out[i] = m.Object
			continue
		}
		idx[k] = len(out)
		out = append(out, m.Object)
	}
	return out
}
