package collections

import (
	"math/rand/v2"
	"slices"
	"testing"
)

var addressCases = []string{
	"10.0.0.1", "10.0.0.9", "10.0.0.10", "10.0.1.0", "9.255.255.255", "0.0.0.0", "255.255.255.255",
	"1.2.3.4", "01.2.3.4", "1.2.3.04", "1.2.3.256", "1.2.3", "1.2.3.4.5", "1..3.4", ".1.2.3", "1.2.3.",
	"1.2.3.4 ", "::1", "::ffff:1.2.3.4", "fe80::1%eth0", "2001:db8::1", "a.example.com", "", "1.2.3.-4",
	"999.1.1.1", "1.2.3.4/32",
}

func TestCompareAddressesKeepsTheParsedOrder(t *testing.T) {
	for _, a := range addressCases {
		for _, b := range addressCases {
			if got, want := CompareAddresses(a, b), compareParsed(a, b); got != want {
				t.Errorf("CompareAddresses(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	// The numeric order, not the spelling's (10.0.0.9 before 10.0.0.10); IPs before names.
	got := []string{"10.0.0.10", "a.example.com", "10.0.0.9", "999.1.1.1", "::1", "10.0.0.100", "9.0.0.1"}
	slices.SortFunc(got, CompareAddresses)
	if want := []string{"9.0.0.1", "10.0.0.9", "10.0.0.10", "10.0.0.100", "::1", "999.1.1.1", "a.example.com"}; !slices.Equal(got, want) {
		t.Errorf("sorted %v, want %v", got, want)
	}
}

func FuzzCompareAddresses(f *testing.F) {
	for i, a := range addressCases {
		f.Add(a, addressCases[(i+1)%len(addressCases)])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if got, want := CompareAddresses(a, b), compareParsed(a, b); got != want {
			t.Errorf("CompareAddresses(%q, %q) = %d, want %d", a, b, got, want)
		}
	})
}

// TestMergeEndpointsOrder: the merge keeps the order and the winners a plain sort by
// CompareEndpoints and Better gives, over addresses of every kind, duplicates included.
func TestMergeEndpointsOrder(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := 0; round < 200; round++ {
		var in []Endpoint
		for i := 0; i < 1+rng.IntN(40); i++ {
			in = append(in, Endpoint{
				Address:  addressCases[rng.IntN(len(addressCases))],
				PortName: []string{"http", "grpc"}[rng.IntN(2)],
				Port:     uint32(8080 + rng.IntN(2)),
				Health:   HealthStatus(rng.IntN(5)), // Unknown (0) to Terminating (4)
				Slice:    []string{"s1", "s2"}[rng.IntN(2)],
			})
		}
		got, _ := MergeRecorded(AppendRefs(nil, in))
		// The reference: sort copies by the full comparison, keep the first of each key.
		want := slices.Clone(in)
		slices.SortStableFunc(want, func(a, b Endpoint) int {
			if c := CompareEndpoints(&a, &b); c != 0 && !(a.Address == b.Address && a.PortName == b.PortName) {
				return c
			}
			if Better(a, b) {
				return -1
			}
			if Better(b, a) {
				return 1
			}
			return 0
		})
		want = slices.CompactFunc(want, func(a, b Endpoint) bool { return a.Address == b.Address && a.PortName == b.PortName })
		if len(got) != len(want) {
			t.Fatalf("round %d: %d endpoints, want %d", round, len(got), len(want))
		}
		for i := range want {
			// Equal keys that neither Better nor the order tells apart may come in any order;
			// everything compared must match.
			if g, w := got[i], want[i]; g.Address != w.Address || g.PortName != w.PortName || g.Health.rank() != w.Health.rank() || g.Slice != w.Slice || g.Port != w.Port {
				t.Fatalf("round %d, endpoint %d: %+v, want %+v", round, i, *g, w)
			}
		}
	}
}

// TestBetterRanksHealth: of two copies of one (address, port name), the one a client can use
// wins: HEALTHY, then UNKNOWN (an entry nothing health-checks, which clients use), then
// DRAINING, UNHEALTHY, TERMINATING. istiod has no such rule (its map order decides, and a
// WorkloadEntry a Service selects is sent beside a slice endpoint of the same address); krteds'
// rule is deterministic.
func TestBetterRanksHealth(t *testing.T) {
	order := []HealthStatus{Healthy, Unknown, Draining, UnHealthy, Terminating}
	for i, a := range order {
		for j, b := range order {
			ea := Endpoint{Address: "10.0.0.1", PortName: "http", Health: a, Slice: "z"}
			eb := Endpoint{Address: "10.0.0.1", PortName: "http", Health: b, Slice: "a"}
			if got, want := Better(ea, eb), i < j; i != j && got != want {
				t.Errorf("Better(%s, %s) = %v, want %v", a, b, got, want)
			}
		}
		got, _ := MergeRecorded(AppendRefs(nil, []Endpoint{{Address: "10.0.0.1", PortName: "http", Health: Terminating, Slice: "a"}, {Address: "10.0.0.1", PortName: "http", Health: a, Slice: "b"}}))
		if len(got) != 1 || got[0].Health != a {
			t.Errorf("merging %s with a terminating copy kept %+v", a, got)
		}
	}
	if s := Unknown.String(); s != "Unknown" {
		t.Errorf("Unknown.String() = %q", s)
	}
}
