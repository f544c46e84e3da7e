package xds

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
)

// releasingPool is where a response's buffers go back once gRPC has written them (or dropped
// them with its stream): the framing's pieces to the framing pool, the bodies (shared, never
// reused) nowhere. Each piece that comes back is progress; the last gives the ticket's bytes
// back and closes written.
type releasingPool struct {
	ticket *ticket
	// pieces are the pieces still to come back; progress counts those that came.
	pieces   atomic.Int64
	progress atomic.Int64
	// written is closed once every piece is back.
	written chan struct{}
	once    sync.Once
}

func newReleasingPool(t *ticket) *releasingPool {
	return &releasingPool{ticket: t, written: make(chan struct{})}
}

// framing is the pool of the response's framing pieces.
func (p *releasingPool) framing() mem.BufferPool { return framingPieces{p} }

// bodies is the pool of the response's body pieces.
func (p *releasingPool) bodies() mem.BufferPool { return bodyPieces{p} }

// expect counts pieces that will come back.
func (p *releasingPool) expect(n int) { p.pieces.Add(int64(n)) }

// back is one piece back: progress, and the last one done.
func (p *releasingPool) back() {
	p.progress.Add(1)
	if p.pieces.Add(-1) == 0 {
		p.done()
	}
}

// abandon gives the response's bytes back without its pieces: its stream has ended, and gRPC
// drops what it still holds of it.
func (p *releasingPool) abandon() { p.done() }

func (p *releasingPool) done() {
	p.once.Do(func() {
		p.ticket.release()
		close(p.written)
	})
}

type framingPieces struct{ p *releasingPool }

func (f framingPieces) Get(size int) *[]byte { return framingBuffers.Get(size) }
func (f framingPieces) Put(b *[]byte) {
	framingBuffers.Put(b)
	f.p.back()
}

type bodyPieces struct{ p *releasingPool }

func (f bodyPieces) Get(size int) *[]byte { b := make([]byte, size); return &b }
func (f bodyPieces) Put(*[]byte)          { f.p.back() }

var (
	_ mem.BufferPool = framingPieces{}
	_ mem.BufferPool = bodyPieces{}
)
