package xds

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"

	"github.com/cespare/xxhash/v2"
	"google.golang.org/grpc"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// fakeSource is a Source whose resources tests set by hand. Every proxy has the same view.
type fakeSource struct {
	mu      sync.Mutex
	res     map[string]map[string]*collections.Resource
	pending map[string]map[string]bool
	// views of connected proxies; a proxy has its view once connected, unless held.
	conns   map[string]bool
	hold    bool
	subs    []func(collections.Change)
	synced  chan struct{}
	version uint64
	// follows maps a name to the name it follows (Follows); set before the server starts.
	follows map[string]string
	// views replace fakeView for the connections they name; cols are the LEDS collections, and
	// colPending those being computed.
	views      map[string]*collections.View
	cols       map[string]*collections.LEDSCollection
	colPending map[string]bool
}

func newFakeSource() *fakeSource {
	f := &fakeSource{res: map[string]map[string]*collections.Resource{}, pending: map[string]map[string]bool{},
		conns: map[string]bool{}, synced: make(chan struct{})}
	close(f.synced)
	return f
}

var fakeView = &collections.View{Key: "v", ClassKey: "c", Namespace: "ns1"}

func (f *fakeSource) WaitUntilSynced(stop <-chan struct{}) bool {
	select {
	case <-f.synced:
		return true
	case <-stop:
		return false
	}
}

func (f *fakeSource) Connect(p collections.ConnectedProxy) {
	f.mu.Lock()
	f.conns[p.ConnID] = true
	f.mu.Unlock()
}

func (f *fakeSource) Disconnect(id string) {
	f.mu.Lock()
	delete(f.conns, id)
	f.mu.Unlock()
}

func (f *fakeSource) connected() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *fakeSource) View(id string) *collections.View {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.conns[id] {
		return nil
	}
	if v := f.views[id]; v != nil {
		return v
	}
	return fakeView
}

// setView gives a connection a view of its own and says so.
func (f *fakeSource) setView(connID string, v *collections.View) {
	f.mu.Lock()
	if f.views == nil {
		f.views = map[string]*collections.View{}
	}
	f.views[connID] = v
	f.mu.Unlock()
	f.notify(collections.Change{Conns: []string{connID}})
}

func (f *fakeSource) ResolveCollection(_ *collections.View, typeURL, glob string) (*collections.LEDSCollection, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.colPending[glob] {
		return nil, true
	}
	return f.cols[glob], false
}

// setCollection makes a LEDS collection of members ("name@version") and says so.
func (f *fakeSource) setCollection(glob string, members ...string) {
	c := &collections.LEDSCollection{Name: glob}
	for _, m := range members {
		name, v, _ := strings.Cut(m, "@")
		ver := xxhash.Sum64String(v) | 1
		c.Members = append(c.Members, &collections.Resource{Name: name, TypeURL: typeLbEndpoint, Version: ver, Body: []byte(name + "#" + v)})
	}
	f.mu.Lock()
	if f.cols == nil {
		f.cols = map[string]*collections.LEDSCollection{}
	}
	f.cols[glob] = c
	f.mu.Unlock()
	f.notify(collections.Change{TypeURL: typeLbEndpoint, Names: []string{glob}})
}

// setCollectionPending makes a collection pending (nothing is announced) or computed (announced).
func (f *fakeSource) setCollectionPending(glob string, on bool) {
	f.mu.Lock()
	if f.colPending == nil {
		f.colPending = map[string]bool{}
	}
	f.colPending[glob] = on
	f.mu.Unlock()
	if !on {
		f.notify(collections.Change{TypeURL: typeLbEndpoint, Names: []string{glob}})
	}
}

func (f *fakeSource) Resolve(_ *collections.View, typeURL, name string) (*collections.Resource, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending[typeURL][name] {
		return nil, true
	}
	return f.res[typeURL][name], false
}

func (f *fakeSource) List(_ *collections.View, typeURL string) []*collections.Resource {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*collections.Resource
	for _, r := range f.res[typeURL] {
		out = append(out, r)
	}
	return out
}

func (f *fakeSource) Follows(_, name string) string { return f.follows[name] }

func (f *fakeSource) Holds(typeURL, name string, version uint64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := f.res[typeURL][name]
	return r != nil && r.Version == version
}

func (f *fakeSource) Subscribe(fn func(collections.Change)) {
	f.mu.Lock()
	f.subs = append(f.subs, fn)
	f.mu.Unlock()
}

func (f *fakeSource) notify(ch collections.Change) {
	f.mu.Lock()
	subs := append([]func(collections.Change){}, f.subs...)
	f.mu.Unlock()
	for _, fn := range subs {
		fn(ch)
	}
}

// set gives a resource a new version (creating it) and says so.
func (f *fakeSource) set(typeURL, name string) *collections.Resource {
	f.mu.Lock()
	f.version++
	body := []byte(name + "#" + string(rune('a'+f.version%26)) + string(rune(f.version)))
	r := &collections.Resource{Name: name, TypeURL: typeURL, Version: xxhash.Sum64(body) | 1, Body: body}
	if f.res[typeURL] == nil {
		f.res[typeURL] = map[string]*collections.Resource{}
	}
	f.res[typeURL][name] = r
	f.mu.Unlock()
	f.notify(collections.Change{TypeURL: typeURL, Names: []string{name}})
	return r
}

// remove deletes a resource and says so.
func (f *fakeSource) remove(typeURL, name string) {
	f.mu.Lock()
	delete(f.res[typeURL], name)
	f.mu.Unlock()
	f.notify(collections.Change{TypeURL: typeURL, Names: []string{name}})
}

// setPending makes a name pending (no change is announced) or computed (announced).
func (f *fakeSource) setPending(typeURL, name string, on bool) {
	f.mu.Lock()
	if f.pending[typeURL] == nil {
		f.pending[typeURL] = map[string]bool{}
	}
	f.pending[typeURL][name] = on
	f.mu.Unlock()
	if !on {
		f.notify(collections.Change{TypeURL: typeURL, Names: []string{name}})
	}
}

func (f *fakeSource) current(typeURL, name string) (*collections.Resource, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.res[typeURL][name], f.pending[typeURL][name]
}

// fakeServer runs a server over a fake source on loopback.
type fakeServer struct {
	src  *fakeSource
	srv  *Server
	cc   *grpc.ClientConn
	addr string
}

func startFake(t testing.TB, opts ...func(*Options)) *fakeServer {
	t.Helper()
	src := newFakeSource()
	return startFakeOn(t, src, src, opts...)
}

// startFakeOn serves a source that wraps the fake source fake.
func startFakeOn(t testing.TB, src Source, fake *fakeSource, opts ...func(*Options)) *fakeServer {
	t.Helper()
	o := Options{ClusterID: "Kubernetes", Limits: Limits{StreamRate: -1}} // tests open streams faster than any herd
	for _, opt := range opts {
		opt(&o)
	}
	srv := NewServer(src, o)
	stop := make(chan struct{})
	srv.Start(stop)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := NewGRPCServer(context.Background(), srv, nil)
	go func() { _ = gs.Serve(lis) }()
	cc, err := adsclient.Dial(lis.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cc.Close()
		gs.Stop()
		close(stop)
	})
	return &fakeServer{src: fake, srv: srv, cc: cc, addr: lis.Addr().String()}
}

// fakeName is the name of a resource of the fake source, read from its body.
func fakeName(t testing.TB, body []byte) string {
	t.Helper()
	name, _, ok := strings.Cut(string(body), "#")
	if !ok {
		t.Fatalf("%q is not the body of a fake resource", body)
	}
	return name
}
