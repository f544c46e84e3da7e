// Package memz attributes live heap to the structures that hold it: each root (a collection, the
// xDS server's connections, ...) is walked by reflection, every allocation it reaches is counted
// once (the first root to reach it is charged), and the bytes are split by the root's fields and
// by the type of the allocation.
//
// The figures are estimates of what the Go allocator holds: sizes are rounded to the allocator's
// size classes and maps are costed from their length and the runtime's swiss-table layout. What
// reflection cannot see (closures' captured variables, buffered channel elements, unsafe
// pointers other than atomic.Pointer) is not counted.
//
// The walk only ever try-locks the mutexes it meets (it never waits while holding one), so it
// cannot deadlock with the goroutines that own the structures; a root whose locks stay busy is
// reported as such.
package memz

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
)

// Root is one structure whose memory is attributed.
type Root struct {
	// Group gathers roots in the report ("inputs", "collections", "xds").
	Group string
	Name  string
	Value any
}

// Part is the bytes reached through one field of a root.
type Part struct {
	Field string `json:"field"`
	Bytes int64  `json:"bytes"`
}

// Usage is what one root holds, not counting what an earlier root reached first.
type Usage struct {
	Group       string `json:"group"`
	Name        string `json:"name"`
	Bytes       int64  `json:"bytes"`
	Allocations int64  `json:"allocations"`
	Parts       []Part `json:"parts,omitempty"`
	// Busy is set when the root's locks stayed held by their owners; its figure is then partial.
	Busy bool `json:"busy,omitempty"`
}

// TypeUsage is the bytes held in allocations of one type, over every root.
type TypeUsage struct {
	Type        string `json:"type"`
	Bytes       int64  `json:"bytes"`
	Allocations int64  `json:"allocations"`
}

// Report is the attribution of every root, in the order given.
type Report struct {
	Roots []Usage     `json:"roots"`
	Types []TypeUsage `json:"types"`
	Total int64       `json:"total"`
}

// SharedPackages are packages whose structures are process-wide metadata or infrastructure
// (protobuf type descriptors, loggers, metric registries) that many roots reach: the walk does
// not enter values of their types.
var SharedPackages = []string{
	"google.golang.org/protobuf/internal/",
	"google.golang.org/protobuf/reflect/",
	"istio.io/istio/pkg/log",
	"go.uber.org/zap",
	"github.com/prometheus/",
	"reflect",
}

// Measure walks the roots in order. Stops are structures no root is charged for (shared
// infrastructure reached from many roots, such as a debug registry): the walk does not enter
// them, nor values of the types of SharedPackages.
func Measure(roots []Root, stops ...any) Report {
	w := &walker{
		seen:   map[uintptr]struct{}{},
		arrays: map[uintptr][]span{},
		stops:  map[uintptr]bool{},
		types:  map[reflect.Type]*TypeUsage{},
	}
	for _, r := range roots {
		if p, ok := pointerOf(reflect.ValueOf(r.Value)); ok {
			w.stops[p] = true
		}
	}
	for _, s := range stops {
		if p, ok := pointerOf(reflect.ValueOf(s)); ok {
			w.stops[p] = true
		}
	}
	var rep Report
	for _, r := range roots {
		u := w.root(r)
		rep.Roots = append(rep.Roots, u)
		rep.Total += u.Bytes
	}
	for _, t := range w.types {
		rep.Types = append(rep.Types, *t)
	}
	slices.SortFunc(rep.Types, func(a, b TypeUsage) int {
		return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Type, b.Type))
	})
	return rep
}

// pointerOf is the address a root or stop is known by.
func pointerOf(v reflect.Value) (uintptr, bool) {
	for v.IsValid() {
		switch v.Kind() {
		case reflect.Interface:
			if v.IsNil() {
				return 0, false
			}
			v = v.Elem()
		case reflect.Pointer, reflect.Map, reflect.Chan:
			if v.IsNil() {
				return 0, false
			}
			return v.Pointer(), true
		case reflect.Struct:
			// A struct wrapping one pointer (krt's StaticCollection wraps *staticList).
			if v.NumField() == 1 {
				v = v.Field(0)
				continue
			}
			return 0, false
		default:
			return 0, false
		}
	}
	return 0, false
}
