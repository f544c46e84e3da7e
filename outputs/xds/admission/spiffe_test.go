package admission

import "testing"

func TestParseSpiffeID(t *testing.T) {
	if id, err := ParseSpiffeID("spiffe://td/ns/a/sa/b"); err != nil || id != (Identity{TrustDomain: "td", Namespace: "a", ServiceAccount: "b"}) {
		t.Fatalf("%+v %v", id, err)
	}
	for _, bad := range []string{"", "spiffe://td/ns/a", "spiffe://td/ns//sa/b", "http://td/ns/a/sa/b", "spiffe://td/sa/b/ns/a", "spiffe://td/ns/a/sa/b/c"} {
		if _, err := ParseSpiffeID(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}
