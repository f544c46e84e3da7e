package collections

import "testing"

// A Pod's name and namespace are the parts of its key; a key without a namespace (a Pod made by
// hand) does not panic.
func TestPodNameFromKey(t *testing.T) {
	for key, want := range map[string][2]string{"ns1/a": {"ns1", "a"}, "a": {"", "a"}, "/a": {"", "a"}, "": {"", ""}} {
		p := &Pod{Key: key}
		if got := [2]string{p.Namespace(), p.Name()}; got != want {
			t.Errorf("key %q: namespace, name = %q, want %q", key, got, want)
		}
	}
}
