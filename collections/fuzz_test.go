package collections_test

import (
	"testing"

	"github.com/krteds/krteds/collections"
)

func FuzzDecodeManifests(f *testing.F) {
	f.Add([]byte("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\napiVersion: v1\nkind: List\nitems: []\n"))
	f.Add([]byte("apiVersion: networking.istio.io/v1\nkind: DestinationRule\nmetadata: {name: d, namespace: a}\nspec: {host: x}\n"))
	f.Add([]byte("---\n---\n# only a comment\n"))
	f.Add([]byte("{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"p\"}}"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, _ := collections.DecodeManifests(data, "fuzz")
		for _, o := range objs {
			if o.Object == nil {
				t.Fatal("nil object")
			}
		}
		_ = collections.UniqueObjects(objs)
	})
}
