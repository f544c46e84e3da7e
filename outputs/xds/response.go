package xds

import (
	"strconv"

	"github.com/cespare/xxhash/v2"

	"github.com/krteds/krteds/collections"
)

// item is one resource of a response.
type item struct {
	id  nameID
	res *collections.Resource
	// update: the client held an older version (the convergence metric counts these).
	update bool
	// at is the input change the stream was marked for (unix ns, 0 if none).
	at int64
}

// response is what a stream sends next: the resources of a type a subscription planned, or the
// one answer to a request of a type krteds serves no resources of (other, with its own type URL).
type response struct {
	t     typ
	items []item
	// removed names (strings: the stream may have been their last holder).
	removed []string
	version string
	nonce   string
	// more: the answer goes on in the next response (it was cut at Limits.ResponseBytes);
	// resuming: it is such a next response.
	more, resuming bool
	// delivers: it carries changes to names its client holds (not an answer to a first request,
	// a new view, a forced resend): the send budget's large lane lets it in beside small ones.
	delivers bool
	// other is the type URL of an answer to a type krteds serves no resources of ("" for one of
	// its types); such an answer's delta resources carry no version, and a syncz answer the
	// control plane (controlPlane, encoded).
	other        string
	unversioned  bool
	controlPlane []byte
	// causes are the input changes the resources that changed were computed for, with when the
	// server learned of them: what the response delivers (at most maxCauses).
	causes []timedCause
}

// timedCause is an input change and when the server learned the resource computed for it
// (computed, unix ns).
type timedCause struct {
	collections.Cause
	computed int64
}

// maxCauses bounds the causes a response keeps until it is acknowledged.
const maxCauses = 64

// addCause keeps a cause the response delivers, once.
func (r *response) addCause(c collections.Cause, computed int64) {
	if c.IsZero() || len(r.causes) >= maxCauses {
		return
	}
	for _, o := range r.causes {
		if o.Cause == c {
			return
		}
	}
	r.causes = append(r.causes, timedCause{Cause: c, computed: computed})
}

// typeURL is the response's type URL.
func (r *response) typeURL() string {
	if r.other != "" {
		return r.other
	}
	return r.t.url()
}

// responseVersion is a content hash of a response: the same resources give the same version,
// whichever krteds instance computes it.
func responseVersion(r *response) string {
	h := xxhash.New()
	var b [8]byte
	for _, it := range r.items {
		_, _ = h.WriteString(it.res.Name)
		v := it.res.Version
		for i := range b {
			b[i] = byte(v >> (8 * i))
		}
		_, _ = h.Write(b[:])
	}
	for _, n := range r.removed {
		_, _ = h.WriteString("-" + n)
	}
	return strconv.FormatUint(h.Sum64(), 16)
}
