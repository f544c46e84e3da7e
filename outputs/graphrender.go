package outputs

import (
	"fmt"
	"strings"

	"github.com/krteds/krteds/graphs"
)

// Dot renders a snapshot as a Graphviz digraph: inputs as boxes, derived collections as
// ellipses labelled with their size and recomputations; primary inputs solid, Fetches dashed.
func Dot(s graphs.Snapshot) string {
	var b strings.Builder
	b.WriteString("digraph krteds {\n  rankdir=LR;\n  node [fontname=\"Helvetica\"];\n")
	for _, n := range s.Nodes {
		shape := "ellipse"
		if n.Kind == graphs.KindInput {
			shape = "box"
		}
		fmt.Fprintf(&b, "  %q [shape=%s, label=%q];\n", n.Name, shape,
			fmt.Sprintf("%s\nsize %d, recomputed %d", n.Name, n.Size, n.Recomputes))
	}
	for _, e := range s.Edges {
		style := "solid"
		if e.Kind == graphs.EdgeFetch {
			style = "dashed"
		}
		fmt.Fprintf(&b, "  %q -> %q [style=%s];\n", e.From, e.To, style)
	}
	b.WriteString("}\n")
	return b.String()
}

// Text renders a snapshot as an aligned table of collections followed by their inputs.
func Text(s graphs.Snapshot) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-26s %-8s %8s %8s %14s  %s\n", "COLLECTION", "KIND", "SIZE", "SYNCED", "RECOMPUTATIONS", "READS")
	for _, n := range s.Nodes {
		var reads []string
		if n.Input != "" {
			reads = append(reads, n.Input)
		}
		for _, d := range n.Dependencies {
			reads = append(reads, "fetch:"+d)
		}
		fmt.Fprintf(&b, "%-26s %-8s %8d %8t %14d  %s\n", n.Name, n.Kind, n.Size, n.Synced, n.Recomputes, strings.Join(reads, ", "))
	}
	return b.String()
}
