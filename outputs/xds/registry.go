package xds

import (
	"slices"
	"time"

	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// all lists the open streams.
func (s *Server) all() []*stream {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*stream, 0, len(s.streams))
	for _, st := range s.streams {
		out = append(out, st)
	}
	return out
}

// register adds a stream; an identity that already holds as many streams as it may is refused.
func (s *Server) register(st *stream) error {
	s.mu.Lock()
	if st.identity != nil {
		if s.identities[*st.identity] >= s.limits.StreamsPerIdentity {
			s.mu.Unlock()
			return status.Errorf(codes.ResourceExhausted, "identity %s holds %d streams, the most one identity may", st.identity, s.limits.StreamsPerIdentity)
		}
		s.identities[*st.identity]++
	}
	s.streams[st.id] = st
	s.mu.Unlock()
	s.index.addStream(st)
	return nil
}

// unregister removes an ended stream, its index entries and its references to names (held, per
// type), and tells the source the proxy left.
func (s *Server) unregister(st *stream, held *[numTypes][]nameID) {
	proxy := st.proxy.Load()
	if proxy != nil {
		s.src.Disconnect(st.id)
	}
	s.mu.Lock()
	delete(s.streams, st.id)
	if proxy != nil {
		sts := slices.DeleteFunc(s.byNode[proxy.ID], func(o *stream) bool { return o == st })
		if len(sts) == 0 {
			delete(s.byNode, proxy.ID)
		} else {
			s.byNode[proxy.ID] = sts
		}
	}
	if st.identity != nil {
		if s.identities[*st.identity]--; s.identities[*st.identity] <= 0 {
			delete(s.identities, *st.identity)
		}
	}
	s.mu.Unlock()
	s.index.removeStream(st, held)
	if proxy != nil {
		s.metrics.clients(proxy.Type, st.istioVersion, -1)
		if ok, held := s.logs.disconnects.allow(time.Now()); ok {
			s.log.Info("xDS client disconnected", zap.String("conn", st.id), zap.Int("suppressedLogLines", held))
		}
	}
}

// indexNode lists an identified stream under its node id.
func (s *Server) indexNode(st *stream) {
	id := st.proxy.Load().ID
	s.mu.Lock()
	s.byNode[id] = append(s.byNode[id], st)
	s.mu.Unlock()
}

// Streams is the number of open streams.
func (s *Server) Streams() int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return len(s.streams)
}
