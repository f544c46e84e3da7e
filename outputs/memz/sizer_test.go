package memz

import (
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/krteds/krteds/test/fixtures"
)

type item struct {
	Name   string
	Labels map[string]string
	IPs    []string
	Next   *item
	Any    any
	Ptr    atomic.Pointer[[]byte]
}

type store struct {
	mu    sync.RWMutex
	items map[string]*item
	order []*item
	sets  map[string]map[string]struct{}
	ch    chan int
}

func build(n int) *store {
	s := &store{items: map[string]*item{}, sets: map[string]map[string]struct{}{}, ch: make(chan int, 100)}
	shared := map[string]string{"app": "shared", "version": "v1"}
	for i := 0; i < n; i++ {
		it := &item{Name: fmt.Sprintf("item-%06d", i), IPs: []string{fmt.Sprintf("10.0.%d.%d", i>>8&255, i&255)}}
		if i%2 == 0 {
			it.Labels = shared
		} else {
			it.Labels = map[string]string{"app": fmt.Sprint("app-", i), "zone": strings.Repeat("z", i%40)}
		}
		if i > 0 {
			it.Next = s.order[i-1]
		}
		it.Any = struct{ A, B int64 }{int64(i), 2}
		b := make([]byte, i%300)
		it.Ptr.Store(&b)
		s.items[it.Name] = it
		s.order = append(s.order, it)
		set := s.sets[it.Name[:9]]
		if set == nil {
			set = map[string]struct{}{}
			s.sets[it.Name[:9]] = set
		}
		set[it.Name] = struct{}{}
	}
	return s
}

// The accounting of a structure of maps, slices, strings, interfaces and atomic pointers is the
// heap it holds, within a few percent.
func TestMeasureMatchesHeap(t *testing.T) {
	for _, n := range []int{10, 1000, 50000} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			base := fixtures.LiveHeap()
			s := build(n)
			held := fixtures.LiveHeap() - base
			rep := Measure([]Root{{Group: "test", Name: "store", Value: s}})
			runtime.KeepAlive(s)
			if n < 1000 {
				return // too small to compare with the heap's noise
			}
			diff := math.Abs(float64(rep.Total)-float64(held)) / float64(held)
			t.Logf("heap %d, accounted %d (%.1f%%); parts %+v", held, rep.Total, 100*diff, rep.Roots[0].Parts)
			if diff > 0.05 {
				t.Fatalf("accounted %d bytes, the heap holds %d: %.1f%% apart", rep.Total, held, 100*diff)
			}
		})
	}
}

// What two roots share is charged to the first; a root that refers to another is not charged for
// it; stops are not entered.
func TestMeasureCountsOnce(t *testing.T) {
	big := strings.Repeat("x", 10000)
	a := &struct{ S string }{big}
	b := &struct {
		S    string
		A    *struct{ S string }
		Stop *[]byte
	}{S: big, A: a}
	stop := make([]byte, 1<<20)
	b.Stop = &stop
	rep := Measure([]Root{{Name: "a", Value: a}, {Name: "b", Value: b}}, &stop)
	if got := rep.Roots[0].Bytes; got < 10000 || got > 10300 {
		t.Fatalf("a holds %d bytes, want about 10 KB", got)
	}
	if got := rep.Roots[1].Bytes; got > 100 {
		t.Fatalf("b is charged %d bytes, want only its own small struct", got)
	}
}

// Walking a structure whose owner writes to it under its mutex is safe (run with -race), and a
// lock held for long makes the root busy instead of blocking or reading unguarded.
func TestMeasureLocks(t *testing.T) {
	s := build(1000)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.mu.Lock()
			s.items[fmt.Sprint("w-", i%100)] = &item{Name: "w"}
			s.mu.Unlock()
		}
	}()
	for i := 0; i < 20; i++ {
		_ = Measure([]Root{{Name: "store", Value: s}})
	}
	close(stop)
	wg.Wait()

	s.mu.Lock()
	rep := Measure([]Root{{Name: "store", Value: s}})
	s.mu.Unlock()
	if !rep.Roots[0].Busy {
		t.Fatal("a root whose lock stayed held is not reported busy")
	}
	if rep.Roots[0].Bytes > 1000 {
		t.Fatalf("a busy root was walked anyway: %d bytes", rep.Roots[0].Bytes)
	}
}

func TestRoundSize(t *testing.T) {
	for _, c := range []struct {
		n        uintptr
		pointers bool
		want     uintptr
	}{{0, false, 0}, {5, false, 5}, {5, true, 8}, {17, false, 24}, {1025, true, 1152}, {32768, true, 32768}, {32769, true, 40960}} {
		if got := roundSize(c.n, c.pointers); got != c.want {
			t.Errorf("roundSize(%d, %v) = %d, want %d", c.n, c.pointers, got, c.want)
		}
	}
}

// A pointer to an element of an array already charged (one stored copy, referenced elsewhere) is
// part of that array, not another allocation.
func TestMeasurePointersIntoArrays(t *testing.T) {
	type elem struct {
		A, B, C int64
		S       string
	}
	arr := make([]elem, 1000)
	for i := range arr {
		arr[i].S = fmt.Sprintf("element-%04d", i)
	}
	refs := make([]*elem, len(arr))
	for i := range arr {
		refs[i] = &arr[i]
	}
	owner := &struct{ Arr []elem }{arr}
	user := &struct{ Refs []*elem }{refs}
	rep := Measure([]Root{{Name: "owner", Value: owner}, {Name: "user", Value: user}})
	want := int64(roundSize(unsafe.Sizeof(*user), true) + roundSize(uintptr(len(refs))*8, true))
	if got := rep.Roots[1].Bytes; got != want {
		t.Fatalf("the pointers are charged %d bytes, want their struct's and array's %d", got, want)
	}
}
