package xds

import (
	"context"
	"net"
	"sync"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// connTracker knows the client connections of the gRPC servers made by NewGRPCServer, by their
// remote address (a stream's peer): a stream whose client has stopped reading is ended by
// closing its connection, the one way to make gRPC drop a response that flow control holds back
// (ending the stream would queue its status behind that response).
type connTracker struct {
	mu    sync.Mutex
	conns map[string]net.Conn
}

func newConnTracker() *connTracker { return &connTracker{conns: map[string]net.Conn{}} }

// close closes the connection of a stream's peer, if it is still open.
func (t *connTracker) close(peer string) {
	t.mu.Lock()
	c := t.conns[peer]
	t.mu.Unlock()
	if c != nil {
		_ = c.Close()
	}
}

func (t *connTracker) add(c net.Conn) net.Conn {
	tc := &trackedConn{Conn: c, t: t, key: c.RemoteAddr().String()}
	t.mu.Lock()
	t.conns[tc.key] = tc
	t.mu.Unlock()
	return tc
}

func (t *connTracker) size() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.conns)
}

// trackedConn leaves the tracker when closed.
type trackedConn struct {
	net.Conn
	t    *connTracker
	key  string
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.t.mu.Lock()
		if c.t.conns[c.key] == c {
			delete(c.t.conns, c.key)
		}
		c.t.mu.Unlock()
	})
	return c.Conn.Close()
}

// trackingCreds are transport credentials that record each connection once its handshake is
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
	return c.t.add(conn), info, nil
}

func (c trackingCreds) Clone() credentials.TransportCredentials {
	return trackingCreds{TransportCredentials: c.TransportCredentials.Clone(), t: c.t}
}

// ClientHandshake is not used by a server; it is the wrapped credentials'.
func (c trackingCreds) ClientHandshake(ctx context.Context, authority string, raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return c.TransportCredentials.ClientHandshake(ctx, authority, raw)
}
