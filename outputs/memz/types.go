package memz

import (
	"reflect"
	"strings"
	"sync"
	"unsafe"
)

// What the walk does with the types it cannot just follow: the mutexes of a struct it reads
// (try-locked, never waited for), atomic pointers, and which types refer to other memory.

var (
	mutexType   = reflect.TypeFor[sync.Mutex]()
	rwMutexType = reflect.TypeFor[sync.RWMutex]()
)

func isSyncType(t reflect.Type) bool { return t.PkgPath() == "sync" || t.PkgPath() == "sync/atomic" }

// lockFields try-locks the mutexes among v's fields (v addressable), returning the unlock and
// whether all were taken. When one is held elsewhere, none is kept, the walk marks itself busy
// and the caller skips what they guard: the root is walked again.
func (w *walker) lockFields(v reflect.Value) (func(), bool) {
	if !v.CanAddr() {
		return func() {}, true
	}
	var unlocks []func()
	failed := false
	take := func(try func() bool, unlock func()) {
		if try() {
			unlocks = append(unlocks, unlock)
		} else {
			failed = true
		}
	}
	for i := 0; i < v.NumField() && !failed; i++ {
		f := v.Field(i)
		switch f.Type() {
		case mutexType:
			m := (*sync.Mutex)(unsafe.Pointer(f.UnsafeAddr()))
			take(m.TryLock, m.Unlock)
		case rwMutexType:
			m := (*sync.RWMutex)(unsafe.Pointer(f.UnsafeAddr()))
			take(m.TryRLock, m.RUnlock)
		}
	}
	unlock := func() {
		for i := len(unlocks) - 1; i >= 0; i-- {
			unlocks[i]()
		}
	}
	if failed {
		w.busy = true
		unlock()
		return func() {}, false
	}
	return unlock, true
}

// atomicPointer reads the target of a sync/atomic.Pointer[T].
func atomicPointer(v reflect.Value) (reflect.Value, bool) {
	t := v.Type()
	if t.PkgPath() != "sync/atomic" || !strings.HasPrefix(t.Name(), "Pointer[") || !v.CanAddr() {
		return reflect.Value{}, false
	}
	// atomic.Pointer[T] is {_ [0]*T; _ noCopy; v unsafe.Pointer}.
	elem := t.Field(0).Type.Elem() // *T
	var vf reflect.Value
	for i := 0; i < t.NumField(); i++ {
		if t.Field(i).Type.Kind() == reflect.UnsafePointer {
			vf = v.Field(i)
		}
	}
	if !vf.IsValid() {
		return reflect.Value{}, false
	}
	p := *(*unsafe.Pointer)(unsafe.Pointer(vf.UnsafeAddr()))
	if p == nil {
		return reflect.Value{}, true
	}
	return reflect.NewAt(elem.Elem(), p), true
}

var pointerCache sync.Map // reflect.Type → bool

// hasPointers says whether values of t refer to other memory.
func hasPointers(t reflect.Type) bool {
	if v, ok := pointerCache.Load(t); ok {
		return v.(bool)
	}
	var r bool
	switch t.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.String, reflect.Interface, reflect.Chan, reflect.Func, reflect.UnsafePointer:
		r = true
	case reflect.Array:
		r = t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			if hasPointers(t.Field(i).Type) {
				r = true
				break
			}
		}
	}
	pointerCache.Store(t, r)
	return r
}
