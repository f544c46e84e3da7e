package xds

import (
	"fmt"
	"math/bits"
	"strconv"
	"sync"

	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/krteds/krteds/collections"
)

// A response of resources is encoded by krteds itself and handed to gRPC as a list of buffers:
// the protobuf framing of the response and the small bodies, written into one allocation, and
// the large bodies by reference. The proto codec would size the message, take a cleared buffer from its
// pool and copy every body into it, once per stream: for a CLA sent to a thousand proxies, a
// thousand copies before gRPC copies the bytes again into its frames.

// wireMessage is a response encoded by krteds; the server's codec (wireCodec) sends its buffers
// as they are. It is only ever sent on streams of a gRPC server made by NewGRPCServer.
type wireMessage struct{ data mem.BufferSlice }

// wireCodec is the server's codec: wireMessages as they are, discovery requests with their
// resource names interned in names (requests.go), everything else (LRS, debug answers) through
// the proto codec.
type wireCodec struct {
	proto encoding.CodecV2
	names *nameTable
}

func newWireCodec(names *nameTable) wireCodec {
	c := encoding.GetCodecV2("proto")
	if c == nil {
		panic("no proto codec registered")
	}
	return wireCodec{proto: c, names: names}
}

func (wireCodec) Name() string { return "proto" }

func (c wireCodec) Marshal(v any) (mem.BufferSlice, error) {
	if w, ok := v.(*wireMessage); ok {
		return w.data, nil
	}
	return c.proto.Marshal(v)
}

func (c wireCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if _, ok := v.(*wireMessage); ok {
		return fmt.Errorf("a krteds-encoded response cannot be decoded")
	}
	if m, ok := v.(*sotwRequest); ok {
		return decodeSotwRequest(data, m)
	}
	if c.names != nil {
		if ok, err := decodeRequest(data, v, c.names); ok {
			return err
		}
	}
	return c.proto.Unmarshal(data, v)
}

// Field numbers of envoy.service.discovery.v3.DiscoveryResponse, DeltaDiscoveryResponse,
// Resource and google.protobuf.Any.
const (
	fSotwVersion       = 1
	fSotwResources     = 2
	fSotwTypeURL       = 4
	fSotwNonce         = 5
	fSotwControlPlane  = 6
	fDeltaVersion      = 1
	fDeltaResources    = 2
	fDeltaTypeURL      = 4
	fDeltaNonce        = 5
	fDeltaRemoved      = 6
	fDeltaControlPlane = 7
	fResourceVersion   = 1
	fResourceResource  = 2
	fResourceName      = 3
	fAnyTypeURL        = 1
	fAnyValue          = 2
)

// wireWriter writes a response's framing into pieces of at most wirePiece bytes, from
// framingBuffers, and interleaves them with the bodies sent by reference, themselves cut into
// pieces of at most wirePiece bytes. gRPC frees each piece once it has written it: every piece
// that comes back to the response's pool is progress its client made reading it.
type wireWriter struct {
	pool  *releasingPool
	out   mem.BufferSlice
	chunk *[]byte // the framing piece being written
	hdr   []byte  // what is written of it
	left  int     // framing bytes not written yet
}

// wirePiece is the largest piece of a response handed to gRPC: a client reading slowly makes
// progress every piece.
const wirePiece = 32 << 10

func newWireWriter(framing, bodies int, pool *releasingPool) *wireWriter {
	return &wireWriter{pool: pool, left: framing, out: make(mem.BufferSlice, 0, 2*bodies+1+framing/wirePiece)}
}

// reserve makes room for n more framing bytes: the piece being written is sealed when full.
func (w *wireWriter) reserve(n int) {
	if w.chunk != nil && len(w.hdr)+n <= cap(w.hdr) {
		return
	}
	w.seal()
	w.chunk = framingBuffers.Get(max(n, min(w.left, wirePiece)))
	w.hdr = (*w.chunk)[:0]
}

// seal hands the framing written so far to the response as one piece.
func (w *wireWriter) seal() {
	if w.chunk == nil {
		return
	}
	if len(w.hdr) == 0 {
		framingBuffers.Put(w.chunk)
		w.chunk = nil
		return
	}
	w.left -= len(w.hdr)
	*w.chunk = w.hdr // the same array: the piece is its written part
	w.out = append(w.out, w.piece(w.chunk, w.pool.framing()))
	w.chunk, w.hdr = nil, nil
}

// piece is a buffer gRPC gives back to pool once written, counted as expected when it will be
// (gRPC does not pool a buffer of 1 KiB or less: it comes back nowhere).
func (w *wireWriter) piece(b *[]byte, pool mem.BufferPool) mem.Buffer {
	if !mem.IsBelowBufferPoolingThreshold(cap(*b)) {
		w.pool.expect(1)
	}
	return mem.NewBuffer(b, pool)
}

// wireReferenceMin is the smallest body sent by reference; smaller ones are copied into the
// framing. gRPC's writer gathers a frame's pieces into a list it keeps per connection: many
// small pieces would make that list long, and the bodies it still points to would stay alive
// until the connection writes again.
const wireReferenceMin = 2048

func referenced(b []byte) bool { return len(b) >= wireReferenceMin }

// body writes b: copied into the framing when small, else listed by reference at this point of
// the response, in pieces.
func (w *wireWriter) body(b []byte) {
	if !referenced(b) {
		w.reserve(len(b))
		w.hdr = append(w.hdr, b...)
		return
	}
	w.seal()
	for len(b) > 0 {
		n := min(len(b), wirePiece)
		piece := b[:n:n]
		w.out = append(w.out, w.piece(&piece, w.pool.bodies()))
		b = b[n:]
	}
}

// done is the response's pieces, in order.
func (w *wireWriter) done() *wireMessage {
	w.seal()
	return &wireMessage{data: w.out}
}

// framingBuffers is a pool of framing buffers by power-of-two size, handed out uncleared: every
// byte of the framing is written before it is sent. gRPC returns a buffer once every piece of it
// has been written to the connection (or the send failed).
var framingBuffers = &framingPool{}

const (
	// framingMinShift: a buffer of 1 KiB or less is not pooled by gRPC
	// (mem.IsBelowBufferPoolingThreshold), and so never given back: every framing buffer is
	// larger, so that gRPC hands each back once written (the send budget counts on it).
	framingMinShift = 11
	framingMaxShift = 20
)

type framingPool struct {
	tiers [framingMaxShift - framingMinShift + 1]sync.Pool
}

// framingTier is the pool of buffers of capacity 1<<(tier+framingMinShift), -1 when too large.
func framingTier(size int) int {
	switch {
	case size <= 1<<framingMinShift:
		return 0
	case size > 1<<framingMaxShift:
		return -1
	}
	return bits.Len(uint(size-1)) - framingMinShift
}

func (p *framingPool) Get(size int) *[]byte {
	t := framingTier(size)
	if t < 0 {
		b := make([]byte, size)
		return &b
	}
	if b, ok := p.tiers[t].Get().(*[]byte); ok {
		*b = (*b)[:size]
		return b
	}
	b := make([]byte, size, 1<<(t+framingMinShift))
	return &b
}

func (p *framingPool) Put(b *[]byte) {
	if t := framingTier(cap(*b)); t >= 0 && cap(*b) == 1<<(t+framingMinShift) {
		p.tiers[t].Put(b)
	}
}

func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

// lengthOf writes the tag of a length-delimited field and its length, n: its value follows.
func (w *wireWriter) lengthOf(num protowire.Number, n int) {
	w.reserve(protowire.SizeTag(num) + protowire.SizeVarint(uint64(n)))
	w.hdr = protowire.AppendTag(w.hdr, num, protowire.BytesType)
	w.hdr = protowire.AppendVarint(w.hdr, uint64(n))
}

// string writes a string field, unless it is empty (proto3's default is not written).
func (w *wireWriter) string(num protowire.Number, s string) {
	if s == "" {
		return
	}
	w.reserve(sizeString(num, s))
	w.hdr = protowire.AppendTag(w.hdr, num, protowire.BytesType)
	w.hdr = protowire.AppendString(w.hdr, s)
}

// sizeBytes is the size of a bytes field, unless empty.
func sizeBytes(num protowire.Number, b []byte) int {
	if len(b) == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(b))
}

// bytes writes a bytes field (an encoded message), unless empty.
func (w *wireWriter) bytes(num protowire.Number, b []byte) {
	if len(b) == 0 {
		return
	}
	w.lengthOf(num, len(b))
	w.body(b)
}

// anySize is the size of an Any holding a resource; anyFraming the same without the body.
func anySize(r *collections.Resource) int {
	n := sizeString(fAnyTypeURL, r.TypeURL)
	if len(r.Body) > 0 {
		n += protowire.SizeTag(fAnyValue) + protowire.SizeBytes(len(r.Body))
	}
	return n
}

// anyFraming is anySize without a body sent by reference.
func anyFraming(r *collections.Resource) int {
	if referenced(r.Body) {
		return anySize(r) - len(r.Body)
	}
	return anySize(r)
}

// any writes an Any's fields, the body last (by reference).
func (w *wireWriter) any(r *collections.Resource) {
	w.string(fAnyTypeURL, r.TypeURL)
	if len(r.Body) > 0 {
		w.lengthOf(fAnyValue, len(r.Body))
		w.body(r.Body)
	}
}

// sotwFraming is the size of the DiscoveryResponse of r without the bodies sent by reference,
// and the size of those bodies.
func sotwFraming(r *response) (framing, referencedBodies int) {
	framing = sizeString(fSotwVersion, r.version) + sizeString(fSotwTypeURL, r.typeURL()) + sizeString(fSotwNonce, r.nonce) +
		sizeBytes(fSotwControlPlane, r.controlPlane)
	for _, it := range r.items {
		framing += protowire.SizeTag(fSotwResources) + protowire.SizeVarint(uint64(anySize(it.res))) + anyFraming(it.res)
		if referenced(it.res.Body) {
			referencedBodies += len(it.res.Body)
		}
	}
	return framing, referencedBodies
}

// encodeSotw is the DiscoveryResponse of r. Its pieces go back to pool once written.
func encodeSotw(r *response, pool *releasingPool) *wireMessage {
	framing, _ := sotwFraming(r)
	w := newWireWriter(framing, len(r.items), pool)
	w.string(fSotwVersion, r.version)
	for _, it := range r.items {
		w.lengthOf(fSotwResources, anySize(it.res))
		w.any(it.res)
	}
	w.string(fSotwTypeURL, r.typeURL())
	w.string(fSotwNonce, r.nonce)
	w.bytes(fSotwControlPlane, r.controlPlane)
	return w.done()
}

// deltaResourceSize is the size of a Resource (version unless unversioned, then name, then the
// Any: the body comes last, so that a resource is one piece of framing and one body).
func deltaResourceSize(r *collections.Resource, unversioned bool) int {
	n := sizeString(fResourceName, r.Name) + protowire.SizeTag(fResourceResource) + protowire.SizeBytes(anySize(r))
	if !unversioned {
		n += protowire.SizeTag(fResourceVersion) + protowire.SizeBytes(hexLen(r.Version))
	}
	return n
}

// hexLen is the length of v in hexadecimal, as Resource.VersionString writes it ("0" for 0).
func hexLen(v uint64) int { return max(1, (bits.Len64(v)+3)/4) }

// deltaFraming is the size of the DeltaDiscoveryResponse of r without the bodies sent by
// reference, and the size of those bodies.
func deltaFraming(r *response) (framing, referencedBodies int) {
	framing = sizeString(fDeltaVersion, r.version) + sizeString(fDeltaTypeURL, r.typeURL()) + sizeString(fDeltaNonce, r.nonce) +
		sizeBytes(fDeltaControlPlane, r.controlPlane)
	for _, it := range r.items {
		n := deltaResourceSize(it.res, r.unversioned)
		framing += protowire.SizeTag(fDeltaResources) + protowire.SizeVarint(uint64(n)) + n
		if referenced(it.res.Body) {
			framing -= len(it.res.Body)
			referencedBodies += len(it.res.Body)
		}
	}
	for _, name := range r.removed {
		framing += protowire.SizeTag(fDeltaRemoved) + protowire.SizeBytes(len(name))
	}
	return framing, referencedBodies
}

// encodedSize is the size of the message of r on a stream of either protocol.
func encodedSize(r *response, delta bool) int {
	var f, b int
	if delta {
		f, b = deltaFraming(r)
	} else {
		f, b = sotwFraming(r)
	}
	return f + b
}

// itemSize is what one resource adds to a response of either protocol.
func itemSize(res *collections.Resource, delta bool) int {
	if delta {
		n := deltaResourceSize(res, false)
		return protowire.SizeTag(fDeltaResources) + protowire.SizeVarint(uint64(n)) + n
	}
	n := anySize(res)
	return protowire.SizeTag(fSotwResources) + protowire.SizeVarint(uint64(n)) + n
}

// encodeDelta is the DeltaDiscoveryResponse of r. A resource's version is written in
// hexadecimal straight into the framing (VersionString's spelling), not formatted into a string
// per stream. Its pieces go back to pool once written.
func encodeDelta(r *response, pool *releasingPool) *wireMessage {
	framing, _ := deltaFraming(r)
	w := newWireWriter(framing, len(r.items), pool)
	w.string(fDeltaVersion, r.version)
	for _, it := range r.items {
		w.lengthOf(fDeltaResources, deltaResourceSize(it.res, r.unversioned))
		if !r.unversioned {
			w.lengthOf(fResourceVersion, hexLen(it.res.Version))
			w.reserve(hexLen(it.res.Version))
			w.hdr = strconv.AppendUint(w.hdr, it.res.Version, 16)
		}
		w.string(fResourceName, it.res.Name)
		w.lengthOf(fResourceResource, anySize(it.res))
		w.any(it.res)
	}
	w.string(fDeltaTypeURL, r.typeURL())
	w.string(fDeltaNonce, r.nonce)
	for _, name := range r.removed {
		// A removed name is written even when empty, as a repeated string's element is.
		w.reserve(protowire.SizeTag(fDeltaRemoved) + protowire.SizeBytes(len(name)))
		w.hdr = protowire.AppendTag(w.hdr, fDeltaRemoved, protowire.BytesType)
		w.hdr = protowire.AppendString(w.hdr, name)
	}
	w.bytes(fDeltaControlPlane, r.controlPlane)
	return w.done()
}
