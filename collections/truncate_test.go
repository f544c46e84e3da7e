package collections

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncate: text over the bound is cut on a rune boundary at or below it, and says how many
// bytes went; text within it is returned as it is.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		n        int
		want     string
	}{
		{name: "within", in: "abc", n: 3, want: "abc"},
		{name: "empty", in: "", n: 0, want: ""},
		{name: "over", in: "abcdef", n: 4, want: "abcd…(2 more bytes)"},
		{name: "inside a rune", in: "ab€cd", n: 3, want: "ab…(5 more bytes)"}, // € is 3 bytes: cut before it
		{name: "nothing left", in: "€€", n: 1, want: "…(6 more bytes)"},
		{name: "invalid UTF-8 kept as bytes", in: "ab\xffcd", n: 3, want: "ab\xff…(2 more bytes)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Truncate(tc.in, tc.n)
			if got != tc.want {
				t.Fatalf("Truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
			}
			if kept, _, _ := strings.Cut(got, "…("); utf8.ValidString(tc.in) && !utf8.ValidString(kept) {
				t.Fatalf("%q is cut inside a rune", got)
			}
		})
	}
}
