package collections

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// compareAddressesByParse is the order CompareAddresses keeps, computed the slow way.
func compareAddressesByParse(a, b string) int {
	pa, ea := netip.ParseAddr(a)
	pb, eb := netip.ParseAddr(b)
	if ea == nil && eb == nil {
		return pa.Compare(pb)
	}
	return strings.Compare(a, b)
}

var addressCases = []string{
	"10.0.0.1", "10.0.0.9", "10.0.0.10", "10.0.1.0", "9.255.255.255", "0.0.0.0", "255.255.255.255",
	"1.2.3.4", "01.2.3.4", "1.2.3.04", "1.2.3.256", "1.2.3", "1.2.3.4.5", "1..3.4", ".1.2.3", "1.2.3.",
	"1.2.3.4 ", "::1", "::ffff:1.2.3.4", "fe80::1%eth0", "2001:db8::1", "a.example.com", "", "1.2.3.-4",
	"999.1.1.1", "1.2.3.4/32",
}

func TestCompareAddressesKeepsTheParsedOrder(t *testing.T) {
	for _, a := range addressCases {
		for _, b := range addressCases {
			if got, want := CompareAddresses(a, b), compareAddressesByParse(a, b); got != want {
				t.Errorf("CompareAddresses(%q, %q) = %d, want %d", a, b, got, want)
			}
		}
	}
	// The numeric order, not the spelling's: 10.0.0.9 before 10.0.0.10.
	got := []string{"10.0.0.10", "10.0.0.9", "::1", "10.0.0.100", "9.0.0.1"}
	slices.SortFunc(got, CompareAddresses)
	if want := []string{"9.0.0.1", "10.0.0.9", "10.0.0.10", "10.0.0.100", "::1"}; !slices.Equal(got, want) {
		t.Errorf("sorted %v, want %v", got, want)
	}
}

func FuzzCompareAddresses(f *testing.F) {
	for i, a := range addressCases {
		f.Add(a, addressCases[(i+1)%len(addressCases)])
	}
	f.Fuzz(func(t *testing.T, a, b string) {
		if got, want := CompareAddresses(a, b), compareAddressesByParse(a, b); got != want {
			t.Errorf("CompareAddresses(%q, %q) = %d, want %d", a, b, got, want)
		}
	})
}
