package memz

import (
	"reflect"
	"unsafe"
)

// sizeClasses are the Go allocator's small object size classes (internal/runtime/gc).
var sizeClasses = [...]uint16{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

const (
	maxSmallSize = 32768
	pageSize     = 8192
	tinySize     = 16
)

// roundSize is what the allocator reserves for an object of n bytes: pointer-free objects under
// 16 bytes share 16-byte blocks (the tiny allocator), small objects take their size class, large
// ones whole pages.
func roundSize(n uintptr, pointers bool) uintptr {
	if n == 0 {
		return 0
	}
	if !pointers && n < tinySize {
		return n
	}
	if n > maxSmallSize {
		return (n + pageSize - 1) / pageSize * pageSize
	}
	lo, hi := 0, len(sizeClasses)-1
	for lo < hi {
		mid := (lo + hi) / 2
		if uintptr(sizeClasses[mid]) >= n {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return uintptr(sizeClasses[lo])
}

// The runtime's swiss-table map layout (internal/runtime/maps): a header, then either one group of
// 8 slots (small maps) or a directory of tables, each with a power-of-two number of slots in
// groups of 8, each group a control word and 8 key/element slots. Keys or elements over 128
// bytes are stored behind a pointer.
const (
	mapHeaderBytes  = 48
	mapTableBytes   = 32
	groupSlots      = 8
	maxInlineKey    = 128
	maxInlineElem   = 128
	maxTableSlots   = 1024
	maxAvgGroupLoad = 7
)

// mapHeader mirrors internal/runtime/maps.Map.
type mapHeader struct {
	used   uint64
	seed   uintptr
	dirPtr unsafe.Pointer
	dirLen int
}

// mapTable mirrors internal/runtime/maps.table.
type mapTable struct {
	used       uint16
	capacity   uint16
	growthLeft uint16
	localDepth uint8
	index      int
	data       unsafe.Pointer
	lengthMask uint64
}

func groupBytes(t reflect.Type) uintptr {
	k, e := t.Key(), t.Elem()
	if k.Size() > maxInlineKey {
		k = reflect.TypeFor[unsafe.Pointer]()
	}
	if e.Size() > maxInlineElem {
		e = reflect.TypeFor[unsafe.Pointer]()
	}
	slot := reflect.StructOf([]reflect.StructField{{Name: "K", Type: k}, {Name: "E", Type: e}}).Size()
	return 8 + groupSlots*slot
}

// mapBytes is the memory of the map at p (of type t): read from the runtime's own structures when
// they look as expected, else estimated from its length.
func mapBytes(t reflect.Type, p unsafe.Pointer, n int) int64 {
	gb := groupBytes(t)
	pointers := hasPointers(t.Key()) || hasPointers(t.Elem())
	total := int64(roundSize(mapHeaderBytes, true))
	h := (*mapHeader)(p)
	if h.used == uint64(n) && h.dirLen >= 0 && h.dirLen <= 1<<20 {
		if h.dirLen == 0 {
			if h.dirPtr != nil {
				total += int64(roundSize(gb, pointers))
			}
			return total + indirectBytes(t, n)
		}
		dir := unsafe.Slice((**mapTable)(h.dirPtr), h.dirLen)
		total += int64(roundSize(uintptr(h.dirLen)*8, true))
		var prev *mapTable
		ok := true
		for _, tab := range dir {
			if tab == prev {
				continue // directory entries of one table are adjacent
			}
			prev = tab
			if tab == nil || tab.capacity == 0 || tab.capacity > maxTableSlots || tab.capacity&(tab.capacity-1) != 0 {
				ok = false
				break
			}
			total += int64(roundSize(mapTableBytes, true)) + int64(roundSize(uintptr(tab.capacity)/groupSlots*gb, pointers))
		}
		if ok {
			return total + indirectBytes(t, n)
		}
		total = int64(roundSize(mapHeaderBytes, true))
	}
	// Estimate: the smallest power-of-two capacity holding n at the maximum load.
	if n <= groupSlots {
		if n > 0 {
			total += int64(roundSize(gb, pointers))
		}
		return total + indirectBytes(t, n)
	}
	slots := uintptr(n) * groupSlots / maxAvgGroupLoad
	c := uintptr(groupSlots)
	for c < slots {
		c *= 2
	}
	tables := (c + maxTableSlots - 1) / maxTableSlots
	per := min(c, maxTableSlots)
	total += int64(roundSize(tables*8, true)) + int64(tables)*(int64(roundSize(mapTableBytes, true))+int64(roundSize(per/groupSlots*gb, pointers)))
	return total + indirectBytes(t, n)
}

// indirectBytes is the separately allocated keys and elements of a map with large ones.
func indirectBytes(t reflect.Type, n int) int64 {
	var b int64
	if k := t.Key(); k.Size() > maxInlineKey {
		b += int64(n) * int64(roundSize(k.Size(), hasPointers(k)))
	}
	if e := t.Elem(); e.Size() > maxInlineElem {
		b += int64(n) * int64(roundSize(e.Size(), hasPointers(e)))
	}
	return b
}
