package xds

import (
	"runtime"
	"time"
)

// Limits bound what the server holds and how fast it takes on new streams. Zero fields take the
// defaults.
type Limits struct {
	// StreamsPerIdentity bounds the open streams of one authenticated identity (a namespace's
	// service account: a Deployment of thousands of replicas shares one).
	StreamsPerIdentity int
	// SendBudget bounds the bytes of responses handed to gRPC and not yet written, or being
	// encoded, all streams together (flight.go).
	SendBudget int64
	// ResponseBytes bounds one response: a larger answer of a type that may be split (any type
	// on delta streams but LEDS, endpoints and routes on state of the world) goes out in parts,
	// each acknowledged before the next; a single resource larger than it goes alone.
	ResponseBytes int
	// SendTimeout is how long a client may take to read a response before its stream is closed
	// (its budget is held meanwhile); negative: no limit.
	SendTimeout time.Duration
	// StreamRate is the new streams per second let in; past it a new stream is told to retry
	// (RESOURCE_EXHAUSTED), unless it is a delta stream coming back with versions that are
	// current. Negative: no limit.
	StreamRate float64
	// LargeResponses bounds the responses over 64 KiB in flight at once (the next part of an
	// answer under way goes first); negative: no bound.
	LargeResponses int
	// StreamNameBytes bounds the bytes of the names one stream subscribes to, all types
	// together; CallerNameBytes the bytes of the names one caller's streams (an identity's, or a
	// connection's on the plaintext port) subscribed to first, while some stream holds them.
	StreamNameBytes, CallerNameBytes int64
	// StaleAfter is how long a client may be behind what it subscribes to before it is reported
	// stale (the gauge, a log line, /debug/staleness); negative: never.
	StaleAfter time.Duration
}

// Default limits.
const (
	DefaultMaxStreamsPerIdentity = 20000
	DefaultResponseBytes         = 1 << 20
	DefaultSendTimeout           = time.Minute
	DefaultStaleAfter            = 5 * time.Second
	// A proxy asking for every cluster of a mesh of 100 000 service ports holds about 6 MB of
	// names.
	DefaultStreamNameBytes = 16 << 20
	DefaultCallerNameBytes = 64 << 20
	// MaxNameBytes bounds a resource name: krteds' longest are an EDS cluster name of a hostname
	// and a subset and a LEDS collection named after one, a few hundred bytes.
	MaxNameBytes = 4096
)

// DefaultStreamRate is the new streams per second let in by default: 500 per CPU (a herd of a
// thousand proxies is let in within a second on two cores; the send budget paces what they
// are sent).
func DefaultStreamRate() float64 { return 500 * float64(runtime.GOMAXPROCS(0)) }

// WithDefaults fills the zero fields of l.
func (l Limits) WithDefaults() Limits {
	if l.StreamsPerIdentity <= 0 {
		l.StreamsPerIdentity = DefaultMaxStreamsPerIdentity
	}
	if l.SendBudget <= 0 {
		l.SendBudget = DefaultSendBudget
	}
	if l.ResponseBytes <= 0 {
		l.ResponseBytes = DefaultResponseBytes
	}
	if l.SendTimeout == 0 {
		l.SendTimeout = DefaultSendTimeout
	}
	if l.StreamRate == 0 {
		l.StreamRate = DefaultStreamRate()
	}
	if l.LargeResponses == 0 {
		l.LargeResponses = DefaultLargeResponses()
	}
	if l.StaleAfter == 0 {
		l.StaleAfter = DefaultStaleAfter
	}
	if l.StreamNameBytes <= 0 {
		l.StreamNameBytes = DefaultStreamNameBytes
	}
	if l.CallerNameBytes <= 0 {
		l.CallerNameBytes = DefaultCallerNameBytes
	}
	return l
}
