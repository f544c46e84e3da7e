package collections

import (
	"reflect"
	"testing"
	"time"
)

// The element types' Equals decide which recomputations reach the next collection; a field
// Equals forgets to compare silently swallows changes. For every type, two values filled alike
// must be equal, and changing any one field must make them differ (except the fields listed
// with the reason they are not compared).

// fill sets every field of v to a non-zero value, deterministically.
func fill(v reflect.Value, depth int) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("a")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Pointer:
		if depth > 4 {
			return
		}
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth+1)
		v.Set(p)
	case reflect.Slice:
		if depth > 4 {
			return
		}
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		v.Set(reflect.Append(reflect.MakeSlice(v.Type(), 0, 1), e))
	case reflect.Map:
		if depth > 4 {
			return
		}
		m := reflect.MakeMap(v.Type())
		k := reflect.New(v.Type().Key()).Elem()
		fill(k, depth+1)
		e := reflect.New(v.Type().Elem()).Elem()
		fill(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(1000, 0)))
			return
		}
		if v.Type() == reflect.TypeOf(Labels{}) {
			v.Set(reflect.ValueOf(InternLabels(map[string]string{"a": "a"})))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth)
			}
		}
	}
}

// change makes v different from what fill gave it.
func change(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString("b")
	case reflect.Bool:
		v.SetBool(false)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(2)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(2)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(2)
	case reflect.Pointer, reflect.Slice, reflect.Map:
		v.Set(reflect.Zero(v.Type()))
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Unix(2000, 0)))
			return
		}
		if v.Type() == reflect.TypeOf(Labels{}) {
			v.Set(reflect.ValueOf(InternLabels(map[string]string{"a": "b"})))
			return
		}
		for i := 0; i < v.NumField(); i++ {
			if v.Type().Field(i).IsExported() {
				change(v.Field(i))
				return
			}
		}
	}
}

func checkEquals[T any](t *testing.T, equals func(a, b T) bool, notCompared map[string]string) {
	t.Helper()
	var zero T
	typ := reflect.TypeOf(zero)
	mk := func() T {
		var v T
		fill(reflect.ValueOf(&v).Elem(), 0)
		return v
	}
	if !equals(mk(), mk()) {
		t.Errorf("%s: two values filled alike differ", typ)
		return
	}
	for i := 0; i < typ.NumField(); i++ {
		f := typ.Field(i)
		if !f.IsExported() {
			continue
		}
		if _, skip := notCompared[f.Name]; skip {
			continue
		}
		if f.Anonymous {
			// An embedded struct (or pointer to one): each of its fields.
			st := f.Type
			if st.Kind() == reflect.Pointer {
				st = st.Elem()
			}
			for j := 0; j < st.NumField(); j++ {
				b := mk()
				fv := reflect.ValueOf(&b).Elem().Field(i)
				if fv.Kind() == reflect.Pointer {
					fv = fv.Elem()
				}
				change(fv.Field(j))
				if equals(mk(), b) {
					t.Errorf("%s.%s.%s is not compared by Equals", typ, f.Name, st.Field(j).Name)
				}
			}
			continue
		}
		b := mk()
		change(reflect.ValueOf(&b).Elem().Field(i))
		if equals(mk(), b) {
			t.Errorf("%s.%s is not compared by Equals", typ, f.Name)
		}
	}
}

func TestEqualsComparesEveryField(t *testing.T) {
	checkEquals(t, func(a, b ServiceInfo) bool { return a.Equals(&b) }, nil)
	checkEquals(t, func(a, b NodeLocality) bool { return a.Equals(&b) }, nil)
	checkEquals(t, func(a, b EndpointMeta) bool { return a.Equals(&b) }, nil)
	checkEquals(t, func(a, b Slice) bool { return a.Equals(&b) }, map[string]string{
		"TypeMeta":   "never set",
		"ObjectMeta": "only the name and namespace are set, and Key holds both",
		"Seen":       "the same version seen again (a relist) is no change",
	})
	checkEquals(t, SliceEndpoint.Equals, nil)
	checkEquals(t, func(a, b Pod) bool { return a.Equals(&b) }, map[string]string{
		"ReadySince":   "it changes with Ready",
		"ReadyCarried": "it says of ReadySince whether it changed, which Ready says",
		"Version":      "a new version that changes nothing krteds keeps is no change",
		"Seen":         "when the source took the version: a relist is no change",
	})
	checkEquals(t, Endpoint.Equals, nil)
	checkEquals(t, SliceEndpoints.Equals, nil)
	checkEquals(t, ServiceEndpoints.Equals, nil)
	checkEquals(t, ConnectedProxy.Equals, nil)
	checkEquals(t, Proxy.Equals, nil)
	checkEquals(t, ProxyClass.Equals, nil)
	checkEquals(t, FailoverLabels.Equals, nil)
	checkEquals(t, View.Equals, nil)
	checkEquals(t, Visibility.Equals, nil)
	checkEquals(t, ResourceSet.Equals, nil)
	checkEquals(t, func(a, b Resource) bool {
		return ResourceSet{Shared: &a}.Equals(ResourceSet{Shared: &b})
	}, map[string]string{
		"Name":      "a set's name is compared on the set",
		"TypeURL":   "a set's type is compared on the set",
		"Body":      "the version is a hash of the body",
		"Endpoints": "counted from the body",
		"Absent":    "set only on the answers for unknown names, which are in no set",
		"Cause":     "what a version was computed for: the same content is the same resource",
	})
	checkEquals(t, DestinationRule.Equals, nil)
	checkEquals(t, Subset.Equals, nil)
	checkEquals(t, func(a, b TrafficPolicy) bool { return a.Equals(&b) }, nil)
	checkEquals(t, func(a, b LocalitySetting) bool { return a.Equals(&b) }, nil)
	checkEquals(t, func(a, b LBAlgorithm) bool { return a.Equals(&b) }, nil)
	checkEquals(t, OptionalFloat64.Equals, nil)
	checkEquals(t, Distribute.Equals, nil)
	checkEquals(t, Sidecar.Equals, nil)
	checkEquals(t, ServicePolicy.Equals, nil)
	checkEquals(t, ObjectProblems.Equals, nil)
	checkEquals(t, ServiceEntry.Equals, nil)
	checkEquals(t, WorkloadEntry.Equals, nil)
	checkEquals(t, PeerAuthentication.Equals, nil)
}
