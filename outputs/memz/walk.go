package memz

import (
	"cmp"
	"reflect"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"
)

type walker struct {
	seen map[uintptr]struct{}
	// arrays are the charged backing arrays of slices of structs, by the pages they cover: a
	// pointer to one of their elements is part of them, not an allocation of its own.
	arrays map[uintptr][]span
	stops  map[uintptr]bool
	types  map[reflect.Type]*TypeUsage
	// self is the current root's address, which is not a stop while it is walked.
	self uintptr

	bytes, allocs int64
	busy          bool
	// log lists what the current attempt added, to take back if it has to be made again.
	log []charge
}

type charge struct {
	p     uintptr
	t     reflect.Type
	bytes int64
}

func (w *walker) root(r Root) Usage {
	u := Usage{Group: r.Group, Name: r.Name}
	v := reflect.ValueOf(r.Value)
	w.self, _ = pointerOf(v)
	defer func() { w.self = 0 }()
	for attempt := 0; ; attempt++ {
		w.busy = false
		w.log = w.log[:0]
		u.Parts, u.Bytes, u.Allocations = w.parts(v)
		if !w.busy || attempt == 20 {
			u.Busy = w.busy
			return u
		}
		// A lock was held by its owner and what it guards was skipped: take back this attempt
		// and make it again a little later.
		w.rollback()
		time.Sleep(time.Duration(attempt+1) * time.Millisecond)
	}
}

func (w *walker) rollback() {
	for _, c := range w.log {
		if c.p != 0 {
			delete(w.seen, c.p)
		}
		w.bytes -= c.bytes
		w.allocs--
		tu := w.types[c.t]
		tu.Bytes -= c.bytes
		tu.Allocations--
	}
	w.log = w.log[:0]
}

// parts walks a root, splitting its bytes by field: through pointers and interfaces to the
// first struct, whose fields (and the fields of its embedded or inline structs) are the parts.
func (w *walker) parts(v reflect.Value) ([]Part, int64, int64) {
	b0, a0 := w.bytes, w.allocs
	var parts []Part
	var split func(v reflect.Value, prefix string, depth int)
	split = func(v reflect.Value, prefix string, depth int) {
		for {
			switch v.Kind() {
			case reflect.Interface:
				if v.IsNil() {
					return
				}
				if !pointerShaped(v.Elem().Kind()) {
					w.value(v)
					return
				}
				v = v.Elem()
				continue
			case reflect.Pointer:
				if v.IsNil() || !w.enter(v.Pointer(), v.Type().Elem(), v.Type().Elem().Size()) {
					return
				}
				v = v.Elem()
				continue
			}
			break
		}
		if v.Kind() != reflect.Struct || depth > 2 {
			before := w.bytes
			w.value(v)
			if prefix != "" && w.bytes > before {
				parts = append(parts, Part{Field: prefix, Bytes: w.bytes - before})
			}
			return
		}
		unlock, ok := w.lockFields(v)
		defer unlock()
		if !ok {
			return
		}
		t := v.Type()
		for i := 0; i < v.NumField(); i++ {
			f := v.Field(i)
			name := t.Field(i).Name
			if prefix != "" {
				name = prefix + "." + name
			}
			if f.Kind() == reflect.Struct && !isSyncType(f.Type()) || f.Kind() == reflect.Pointer && f.Type().Elem().Kind() == reflect.Struct && (t.Field(i).Anonymous || depth == 0) {
				split(f, name, depth+1)
				continue
			}
			before := w.bytes
			w.value(f)
			if w.bytes > before {
				parts = append(parts, Part{Field: name, Bytes: w.bytes - before})
			}
		}
	}
	split(v, "", 0)
	slices.SortFunc(parts, func(a, b Part) int { return cmp.Or(cmp.Compare(b.Bytes, a.Bytes), strings.Compare(a.Field, b.Field)) })
	return parts, w.bytes - b0, w.allocs - a0
}

func pointerShaped(k reflect.Kind) bool {
	switch k {
	case reflect.Pointer, reflect.Map, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		return true
	}
	return false
}

// enter records an allocation at p of type t and size bytes, and says whether it is new.
func (w *walker) enter(p uintptr, t reflect.Type, size uintptr) bool {
	if p == 0 || (w.stops[p] && p != w.self) || shared(t) {
		return false
	}
	if _, ok := w.seen[p]; ok {
		return false
	}
	w.seen[p] = struct{}{}
	if w.inArray(p) {
		return false // an element of an array already charged and walked
	}
	w.charge(p, t, int64(roundSize(size, hasPointers(t))))
	return true
}

type span struct{ lo, hi uintptr }

const pageShift = 12

// addArray records a charged array of n bytes at p.
func (w *walker) addArray(p, n uintptr) {
	if n == 0 {
		return
	}
	for pg := p >> pageShift; pg <= (p+n-1)>>pageShift; pg++ {
		w.arrays[pg] = append(w.arrays[pg], span{p, p + n})
	}
}

// inArray says whether p points inside a recorded array (past its start, which is seen already).
func (w *walker) inArray(p uintptr) bool {
	for _, s := range w.arrays[p>>pageShift] {
		if p > s.lo && p < s.hi {
			return true
		}
	}
	return false
}

var sharedCache sync.Map // reflect.Type → bool

// shared says whether t belongs to one of SharedPackages.
func shared(t reflect.Type) bool {
	if v, ok := sharedCache.Load(t); ok {
		return v.(bool)
	}
	pkg := t.PkgPath()
	r := false
	for _, p := range SharedPackages {
		if pkg == p || strings.HasPrefix(pkg, p) && (strings.HasSuffix(p, "/") || strings.HasPrefix(pkg, p+"/")) {
			r = true
			break
		}
	}
	sharedCache.Store(t, r)
	return r
}

// charge counts one allocation of n bytes of type t (found at p, or 0 when it has no known
// address).
func (w *walker) charge(p uintptr, t reflect.Type, n int64) {
	w.log = append(w.log, charge{p: p, t: t, bytes: n})
	w.bytes += n
	w.allocs++
	tu := w.types[t]
	if tu == nil {
		tu = &TypeUsage{Type: t.String()}
		w.types[t] = tu
	}
	tu.Bytes += n
	tu.Allocations++
}

// value walks what v refers to (v's own bytes are part of whatever holds it).
func (w *walker) value(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		if n := v.Len(); n > 0 {
			p := uintptr(unsafe.Pointer(unsafe.StringData(v.String())))
			if _, ok := w.seen[p]; !ok {
				w.seen[p] = struct{}{}
				w.charge(p, stringType, int64(roundSize(uintptr(n), false)))
			}
		}
	case reflect.Pointer:
		if v.IsNil() {
			return
		}
		et := v.Type().Elem()
		if !w.enter(v.Pointer(), et, et.Size()) {
			return
		}
		w.value(v.Elem())
	case reflect.Struct:
		if a, ok := atomicPointer(v); ok {
			w.value(a)
			return
		}
		if !hasPointers(v.Type()) {
			return
		}
		unlock, ok := w.lockFields(v)
		defer unlock()
		if !ok {
			return
		}
		for i := 0; i < v.NumField(); i++ {
			w.value(v.Field(i))
		}
	case reflect.Array:
		if !hasPointers(v.Type().Elem()) {
			return
		}
		for i := 0; i < v.Len(); i++ {
			w.value(v.Index(i))
		}
	case reflect.Slice:
		if v.IsNil() || v.Cap() == 0 {
			return
		}
		et := v.Type().Elem()
		p := v.Pointer()
		if p == 0 || (w.stops[p] && p != w.self) {
			return
		}
		if _, ok := w.seen[p]; ok {
			return
		}
		w.seen[p] = struct{}{}
		w.charge(p, v.Type(), int64(roundSize(uintptr(v.Cap())*et.Size(), hasPointers(et))))
		if et.Kind() == reflect.Struct && v.Cap() > 1 {
			w.addArray(p, uintptr(v.Cap())*et.Size())
		}
		if hasPointers(et) {
			for i := 0; i < v.Len(); i++ {
				w.value(v.Index(i))
			}
		}
	case reflect.Map:
		if v.IsNil() {
			return
		}
		p := v.Pointer()
		if w.stops[p] && p != w.self {
			return
		}
		if _, ok := w.seen[p]; ok {
			return
		}
		w.seen[p] = struct{}{}
		w.charge(p, v.Type(), mapBytes(v.Type(), v.UnsafePointer(), v.Len()))
		kp, ep := hasPointers(v.Type().Key()), hasPointers(v.Type().Elem())
		if !kp && !ep {
			return
		}
		it := v.MapRange()
		for it.Next() {
			if kp {
				w.value(it.Key())
			}
			if ep {
				w.value(it.Value())
			}
		}
	case reflect.Interface:
		if v.IsNil() {
			return
		}
		e := v.Elem()
		if pointerShaped(e.Kind()) {
			w.value(e)
			return
		}
		// A non-pointer value in an interface is boxed in an allocation of its own; it is found
		// again through the interface's data word when the interface is addressable.
		if v.CanAddr() {
			data := (*[2]unsafe.Pointer)(unsafe.Pointer(v.UnsafeAddr()))[1]
			if data != nil && e.Type().Size() > 0 {
				if !w.enter(uintptr(data), e.Type(), e.Type().Size()) {
					return
				}
			}
		} else if e.Type().Size() > 0 {
			w.charge(0, e.Type(), int64(roundSize(e.Type().Size(), hasPointers(e.Type()))))
		}
		w.value(e)
	case reflect.Chan:
		if v.IsNil() {
			return
		}
		// The channel header (hchan, 96 bytes) and its buffer.
		w.enter(v.Pointer(), v.Type(), 96+uintptr(v.Cap())*v.Type().Elem().Size())
	}
}

var stringType = reflect.TypeFor[string]()
