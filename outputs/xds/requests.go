package xds

import (
	"encoding/binary"
	"errors"
	"io"
	"math"
	"unicode/utf8"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// request is one discovery request, of either variant, as a subscription reads it.
type request struct {
	delta       bool
	node        *core.Node
	typeURL     string
	nonce       string
	errorDetail *rpcstatus.Status
	// list is a state-of-the-world request's list of names, read only if it is needed.
	list *sotwRequest
	// subscribe, unsubscribe and initial are a delta request's.
	subscribe, unsubscribe []string
	initial                map[string]string
}

func sotwRequestOf(m *sotwRequest) request {
	r := &m.req
	return request{node: r.GetNode(), typeURL: r.GetTypeUrl(), nonce: r.GetResponseNonce(), errorDetail: r.GetErrorDetail(), list: m}
}

func deltaRequestOf(r *discovery.DeltaDiscoveryRequest) request {
	return request{delta: true, node: r.GetNode(), typeURL: r.GetTypeUrl(), nonce: r.GetResponseNonce(), errorDetail: r.GetErrorDetail(),
		subscribe: r.GetResourceNamesSubscribe(), unsubscribe: r.GetResourceNamesUnsubscribe(), initial: r.GetInitialResourceVersions()}
}

// names are the resource names a request subscribes to.
func (r request) names(table *nameTable) ([]string, error) {
	if r.list != nil {
		return r.list.names(table)
	}
	return r.subscribe, nil
}

// Requests are decoded with their resource names interned: a name the server already holds (a
// subscription of another stream) takes the table's copy instead of a new string. A proxy that
// asks for every cluster of a large mesh sends tens of thousands of names, and a herd of them
// sends them all at once; a state-of-the-world client repeats its whole list with every ACK. The
// proto decoder would make a string of each name of each request.
//
// The names (DiscoveryRequest.resource_names, DeltaDiscoveryRequest.resource_names_subscribe,
// _unsubscribe and the keys of initial_resource_versions) are read here; every other field goes
// through the proto decoder as it came.

// Field numbers of envoy.service.discovery.v3.DiscoveryRequest and DeltaDiscoveryRequest, and
// of a map entry.
const (
	fSotwReqResourceNames    = 3
	fDeltaReqSubscribe       = 3
	fDeltaReqUnsubscribe     = 4
	fDeltaReqInitialVersions = 5
	fMapKey                  = 1
	fMapValue                = 2
)

var errMalformedRequest = errors.New("malformed discovery request")

// requestScratch holds a request's bytes while it is decoded (strings are copied out of it),
// and the fields that are not names.
type requestScratch struct{ in, rest []byte }

// decodeRequest decodes a DiscoveryRequest or DeltaDiscoveryRequest, interning its names in
// names; ok is false for any other message.
func decodeRequest(data mem.BufferSlice, v any, names *nameTable) (ok bool, err error) {
	var delta *discovery.DeltaDiscoveryRequest
	sotw, isSotw := v.(*discovery.DiscoveryRequest)
	if !isSotw {
		if delta, ok = v.(*discovery.DeltaDiscoveryRequest); !ok {
			return false, nil
		}
	}
	// The request's bytes in one piece, for as long as it is decoded (every string is copied
	// out): not pooled, as the largest requests of a herd arrive all at once.
	s := &requestScratch{in: data.Materialize()}
	var subscribe, unsubscribe []string
	var initial map[string]string
	err = names.reading(func(lookup func([]byte) (string, bool)) error {
		return s.fields(isSotw, lookup, &subscribe, &unsubscribe, &initial)
	})
	if err != nil {
		return true, err
	}
	if isSotw {
		if err := proto.Unmarshal(s.rest, sotw); err != nil {
			return true, err
		}
		sotw.ResourceNames = subscribe
		return true, nil
	}
	if err := proto.Unmarshal(s.rest, delta); err != nil {
		return true, err
	}
	delta.ResourceNamesSubscribe, delta.ResourceNamesUnsubscribe, delta.InitialResourceVersions = subscribe, unsubscribe, initial
	return true, nil
}

// eachField calls f with each field of an encoded message: its number and wire type, the whole
// field and its value (a length-delimited value with its length prefix).
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, field, value []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errMalformedRequest
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return errMalformedRequest
		}
		if err := f(num, typ, b[:n+m], b[n:n+m]); err != nil {
			return err
		}
		b = b[n+m:]
	}
	return nil
}

// fields reads the request's fields from s.in: the names into subscribe, unsubscribe and
// initial, every other field copied to s.rest.
func (s *requestScratch) fields(isSotw bool, lookup func([]byte) (string, bool), subscribe, unsubscribe *[]string, initial *map[string]string) error {
	return eachField(s.in, func(num protowire.Number, typ protowire.Type, field, value []byte) error {
		switch {
		case typ != protowire.BytesType:
		case isSotw && num == fSotwReqResourceNames, !isSotw && num == fDeltaReqSubscribe:
			name, err := internedString(value, lookup)
			if err != nil {
				return err
			}
			*subscribe = append(*subscribe, name)
			return nil
		case !isSotw && num == fDeltaReqUnsubscribe:
			name, err := internedString(value, lookup)
			if err != nil {
				return err
			}
			*unsubscribe = append(*unsubscribe, name)
			return nil
		case !isSotw && num == fDeltaReqInitialVersions:
			k, v, err := mapEntry(value, lookup)
			if err != nil {
				return err
			}
			if *initial == nil {
				*initial = map[string]string{}
			}
			(*initial)[k] = v
			return nil
		}
		s.rest = append(s.rest, field...)
		return nil
	})
}

// internedString is the string of a length-delimited field's value (its length prefix
// included): the names table's copy when it holds the name.
func internedString(value []byte, lookup func([]byte) (string, bool)) (string, error) {
	b, n := protowire.ConsumeBytes(value)
	if n < 0 {
		return "", errMalformedRequest
	}

	if !utf8.Valid(b) {
		return "", errors.New("a resource name is not valid UTF-8")
	}
	if s, ok := lookup(b); ok {
		return s, nil
	}
	return string(b), nil
}

// mapEntry reads a map<string, string> entry (its length prefix included), the key interned.
func mapEntry(value []byte, lookup func([]byte) (string, bool)) (k, v string, err error) {
	b, n := protowire.ConsumeBytes(value)
	if n < 0 {
		return "", "", errMalformedRequest
	}
	err = eachField(b, func(num protowire.Number, typ protowire.Type, _, value []byte) error {
		if typ != protowire.BytesType {
			return nil
		}
		switch num {
		case fMapKey:
			var err error
			k, err = internedString(value, lookup)
			return err
		case fMapValue:
			s, n := protowire.ConsumeBytes(value)
			if n < 0 {
				return errMalformedRequest
			}
			if !utf8.Valid(s) {
				return errors.New("a resource version is not valid UTF-8")
			}
			v = string(s)
		}
		return nil
	})
	return k, v, err
}

// sotwRequest is a state-of-the-world request whose names are read only if they are needed:
// an ACK repeats the whole subscription, and a stream that holds it already tells that from the
// list's hash (listHash, computed here from the bytes as they came) without reading a name.
type sotwRequest struct {
	req discovery.DiscoveryRequest
	// hash is listHash of the names, n their number; data holds the request's bytes, in the
	// pieces gRPC received them in, until names has read them or the request is released.
	hash uint64
	n    int
	data mem.BufferSlice
	// list holds the names once read.
	list []string
	read bool
}

// decodeSotwRequest decodes a request but for its names, which it counts and hashes: the hash
// (rawListHash) is of their fields as encoded, in order. The request's bytes are read in the
// pieces they came in and kept, not copied: a client of ten thousand clusters repeats 700 KB of
// names with every ACK, and the stream reads them only when they differ from the list it holds.
// A request the piecewise reader does not take (a group, a malformed field) is read whole, as
// before.
func decodeSotwRequest(data mem.BufferSlice, m *sotwRequest) error {
	s := requestScan{h: xxhash.New()}
	if s.pieces(data) {
		m.n, m.hash = s.n, s.h.Sum64()
		if err := proto.Unmarshal(s.rest, &m.req); err != nil {
			return err
		}
		if m.n > 0 {
			data.Ref()
			m.data = data
		}
		return nil
	}
	*m = sotwRequest{}
	raw := data.Materialize()
	var rest []byte
	h := xxhash.New()
	run := -1 // where the current run of name fields starts
	at := 0
	err := eachField(raw, func(num protowire.Number, typ protowire.Type, field, _ []byte) error {
		if num == fSotwReqResourceNames && typ == protowire.BytesType {
			if run < 0 {
				run = at
			}
			m.n++
			at += len(field)
			return nil
		}
		if run >= 0 {
			_, _ = h.Write(raw[run:at])
			run = -1
		}
		rest = append(rest, field...)
		at += len(field)
		return nil
	})
	if err != nil {
		return err
	}
	if run >= 0 {
		_, _ = h.Write(raw[run:at])
	}
	m.hash = h.Sum64()
	if m.n > 0 {
		m.data = mem.BufferSlice{mem.SliceBuffer(raw)}
	}
	return proto.Unmarshal(rest, &m.req)
}

// requestScan reads a state-of-the-world request piece by piece: it hashes and counts the name
// fields, copies every other field to rest, and carries a field begun in one piece into the next.
type requestScan struct {
	h     *xxhash.Digest
	n     int
	rest  []byte
	carry []byte
}

// maxFieldHead is the longest a field's tag and length can be: two varints.
const maxFieldHead = 2 * binary.MaxVarintLen64

// pieces reads every piece of a request; false if it met what only the whole-message reader
// takes (a group, a malformed or truncated field).
func (s *requestScan) pieces(data mem.BufferSlice) bool {
	for _, buf := range data {
		b := buf.ReadOnlyData()
		for len(s.carry) > 0 && len(b) > 0 {
			size, _, _, state := fieldAt(s.carry)
			if state == fieldBad {
				return false
			}
			take := min(len(b), maxFieldHead)
			if state == fieldShort && size > 0 {
				take = min(len(b), size-len(s.carry))
			}
			s.carry = append(s.carry, b[:take]...)
			b = b[take:]
			rem, ok := s.fields(s.carry)
			if !ok {
				return false
			}
			s.carry = s.carry[:copy(s.carry, rem)]
		}
		rem, ok := s.fields(b)
		if !ok {
			return false
		}
		s.carry = append(s.carry, rem...)
	}
	return len(s.carry) == 0
}

// fields reads the complete fields at the start of b, and returns what is left: the start of a
// field that continues in the next piece.
func (s *requestScan) fields(b []byte) (rem []byte, ok bool) {
	run := -1 // where the current run of name fields starts
	i := 0
	for i < len(b) {
		// A name of less than 128 bytes: its tag and length a byte each.
		if b[i] == nameTag && i+1 < len(b) && b[i+1] < 0x80 && i+2+int(b[i+1]) <= len(b) {
			if run < 0 {
				run = i
			}
			s.n++
			i += 2 + int(b[i+1])
			continue
		}
		size, num, typ, state := fieldAt(b[i:])
		if state == fieldBad {
			return nil, false
		}
		if state == fieldShort {
			break
		}
		if num == fSotwReqResourceNames && typ == protowire.BytesType {
			if run < 0 {
				run = i
			}
			s.n++
		} else {
			if run >= 0 {
				_, _ = s.h.Write(b[run:i])
				run = -1
			}
			s.rest = append(s.rest, b[i:i+size]...)
		}
		i += size
	}
	if run >= 0 {
		_, _ = s.h.Write(b[run:i])
	}
	return b[i:], true
}

// nameTag is the tag of a DiscoveryRequest's resource name, as one byte.
const nameTag = fSotwReqResourceNames<<3 | byte(protowire.BytesType)

// What fieldAt found at the start of a piece.
const (
	fieldWhole = iota // a whole field
	fieldShort        // a field that continues past the piece (its size, when known)
	fieldBad          // a group, a malformed field: for the whole-message reader
)

// fieldAt reads the field at the start of b: its size (tag, length and value), number and type.
func fieldAt(b []byte) (size int, num protowire.Number, typ protowire.Type, state int) {
	tag, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, 0, shortOrBad(n)
	}
	num, typ = protowire.DecodeTag(tag)
	if num < protowire.MinValidNumber {
		return 0, 0, 0, fieldBad
	}
	switch typ {
	case protowire.VarintType:
		_, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, num, typ, shortOrBad(m)
		}
		size = n + m
	case protowire.Fixed32Type:
		size = n + 4
	case protowire.Fixed64Type:
		size = n + 8
	case protowire.BytesType:
		l, m := protowire.ConsumeVarint(b[n:])
		if m < 0 {
			return 0, num, typ, shortOrBad(m)
		}
		if l > math.MaxInt32 {
			return 0, num, typ, fieldBad
		}
		size = n + m + int(l)
	default:
		return 0, num, typ, fieldBad
	}
	if size > len(b) {
		return size, num, typ, fieldShort
	}
	return size, num, typ, fieldWhole
}

// shortOrBad says what a varint's error code (n < 0) makes of a field: short if the varint was
// cut at the piece's end.
func shortOrBad(n int) int {
	if protowire.ParseError(n) == io.ErrUnexpectedEOF {
		return fieldShort
	}
	return fieldBad
}

// rawListHash is the hash decodeSotwRequest makes of a list of names: of their fields encoded.
func rawListHash(names []string) uint64 {
	h := xxhash.New()
	var b []byte
	for _, n := range names {
		b = protowire.AppendTag(b[:0], fSotwReqResourceNames, protowire.BytesType)
		b = protowire.AppendString(b, n)
		_, _ = h.Write(b)
	}
	return h.Sum64()
}

// names reads the request's names, interned in the table: an error if one is not valid UTF-8,
// as the proto decoder would have said.
func (m *sotwRequest) names(table *nameTable) ([]string, error) {
	if m.read {
		return m.list, nil
	}
	m.read = true
	if m.n == 0 {
		m.release()
		return nil, nil
	}
	var raw []byte
	if len(m.data) == 1 {
		raw = m.data[0].ReadOnlyData()
	} else {
		raw = m.data.Materialize()
	}
	defer m.release()
	m.list = make([]string, 0, m.n)
	err := table.reading(func(lookup func([]byte) (string, bool)) error {
		return eachField(raw, func(num protowire.Number, typ protowire.Type, _, value []byte) error {
			if num != fSotwReqResourceNames || typ != protowire.BytesType {
				return nil
			}
			name, err := internedString(value, lookup)
			if err != nil {
				return err
			}
			m.list = append(m.list, name)
			return nil
		})
	})
	if err != nil {
		m.list = nil
		return nil, err
	}
	return m.list, nil
}

// release gives back the request's bytes, once the stream has applied it.
func (m *sotwRequest) release() {
	if m != nil && m.data != nil {
		m.data.Free()
		m.data = nil
	}
}

// parseVersion reads a version krteds sent (hexadecimal, at most 16 digits).
func parseVersion(v string) (uint64, bool) {
	var n uint64
	if v == "" || len(v) > 16 {
		return 0, false
	}
	for _, ch := range []byte(v) {
		var d byte
		switch {
		case ch >= '0' && ch <= '9':
			d = ch - '0'
		case ch >= 'a' && ch <= 'f':
			d = ch - 'a' + 10
		default:
			return 0, false
		}
		n = n<<4 | uint64(d)
	}
	return n, true
}
