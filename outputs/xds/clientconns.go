package xds

import (
	"context"
	"net"
	"sync"
	"time"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/stats"
)

// connTracker knows the client connections of the gRPC servers made by NewGRPCServer, by their
// remote address (a stream's peer): a stream whose client has stopped reading is ended by
// closing its connection, the one way to make gRPC drop a response that flow control holds back
// (ending the stream would queue its status behind that response).
//
// A connection is noted when its handshake is done (the credentials see it first) and kept once
// gRPC has set it up (the stats handler's TagConn) until it ends (ConnEnd). It is not wrapped:
// gRPC reads a plain TCP connection into buffers it takes only while data is there, and keeps
// a buffer of its own for any other.
type connTracker struct {
	mu sync.Mutex
	// pending are handshaken connections gRPC has not set up yet (one that fails its preface
	// never is: it goes after pendingFor); conns those it has.
	pending map[string]pendingConn
	conns   map[string]net.Conn
}

type pendingConn struct {
	c  net.Conn
	at time.Time
}

// pendingFor bounds how long a connection handshaken but never set up is remembered.
const pendingFor = time.Minute

func newConnTracker() *connTracker {
	return &connTracker{pending: map[string]pendingConn{}, conns: map[string]net.Conn{}}
}

// close closes the connection of a stream's peer, if it is still open.
func (t *connTracker) close(peer string) {
	t.mu.Lock()
	c := t.conns[peer]
	t.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

func (t *connTracker) handshaken(c net.Conn) {
	now := time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, p := range t.pending {
		if now.Sub(p.at) > pendingFor {
			delete(t.pending, k)
		}
	}
	t.pending[c.RemoteAddr().String()] = pendingConn{c: c, at: now}
}

func (t *connTracker) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

type connKey struct{}

// TagConn implements stats.Handler: gRPC has set the connection up.
func (t *connTracker) TagConn(ctx context.Context, info *stats.ConnTagInfo) context.Context {
	if info.RemoteAddr == nil {
		return ctx
	}
	key := info.RemoteAddr.String()
	t.mu.Lock()
	if p, ok := t.pending[key]; ok {
		delete(t.pending, key)
		t.conns[key] = p.c
	}
	t.mu.Unlock()
	return context.WithValue(ctx, connKey{}, key)
}

// HandleConn implements stats.Handler: a connection that ends is forgotten.
func (t *connTracker) HandleConn(ctx context.Context, s stats.ConnStats) {
	if _, end := s.(*stats.ConnEnd); !end {
		return
	}
	if key, ok := ctx.Value(connKey{}).(string); ok {
		t.mu.Lock()
		delete(t.conns, key)
		t.mu.Unlock()
	}
}

// TagRPC implements stats.Handler.
func (t *connTracker) TagRPC(ctx context.Context, _ *stats.RPCTagInfo) context.Context { return ctx }

// HandleRPC implements stats.Handler.
func (t *connTracker) HandleRPC(context.Context, stats.RPCStats) {}

// trackingCreds are transport credentials that note each connection once its handshake is
// done.
type trackingCreds struct {
	credentials.TransportCredentials
	t *connTracker
}

func tracking(creds credentials.TransportCredentials, t *connTracker) credentials.TransportCredentials {
	if creds == nil {
		creds = insecure.NewCredentials()
	}
	return trackingCreds{TransportCredentials: creds, t: t}
}

func (c trackingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return nil, nil, err
	}
	c.t.handshaken(conn)
	return conn, info, nil
}

func (c trackingCreds) Clone() credentials.TransportCredentials {
	return trackingCreds{TransportCredentials: c.TransportCredentials.Clone(), t: c.t}
}

// ClientHandshake is not used by a server; it is the wrapped credentials'.
func (c trackingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, raw)
}
