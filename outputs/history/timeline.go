package history

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/outputs/xds/xdsdebug"
)

// Timeline is when the changes of a cluster's endpoints (of one endpoint, if asked) happened and
// reached the proxies, and where each proxy subscribed to the cluster stands now.
type Timeline struct {
	Service  string  `json:"service"`
	Cluster  string  `json:"cluster"`
	Endpoint string  `json:"endpoint,omitempty"`
	Events   []Event `json:"events"`
	Proxies  Proxies `json:"proxies"`
}

// Event is one moment of the timeline.
type Event struct {
	At   time.Time `json:"at"`
	Text string    `json:"text"`
}

// Proxies is where the proxies subscribed to the cluster stand: how many hold its current CLA
// (acknowledged), how many were sent it and have not acknowledged it, and those behind.
type Proxies struct {
	Subscribed int        `json:"subscribed"`
	Current    int        `json:"current"`
	Sending    int        `json:"sending"`
	Behind     []ProxyLag `json:"behind,omitempty"`
	// Unlisted counts the proxies behind past maxBehindListed.
	Unlisted int `json:"unlisted,omitempty"`
	// Asked is the proxy the question named, listed whatever it holds (nil: none named).
	Asked *ProxyLag `json:"asked,omitempty"`
}

// ProxyLag is what one proxy holds of the cluster against what it would be sent now.
type ProxyLag struct {
	NodeID  string `json:"nodeId"`
	ConnID  string `json:"connectionId"`
	Holds   uint64 `json:"holds,omitempty"`
	Acked   bool   `json:"acked"`
	Current uint64 `json:"current,omitempty"`
	// Changes is how many recorded changes of the cluster's CLA came after the version it
	// holds (-1: that version is older than the record).
	Changes   int              `json:"changes"`
	LastError string           `json:"lastError,omitempty"`
	Behind    *xdsdebug.Behind `json:"behind,omitempty"`
}

// maxBehindListed bounds the proxies behind a timeline lists.
const maxBehindListed = 20

// Timeline joins a service's record with what the proxies subscribed to one of its clusters
// hold (holders, from the xDS server): the events of the changes that touched endpoint ("":
// all), the Pod of the endpoint going away, and where each proxy stands. asked is the connection
// id of the proxy the question is about ("": none).
func (s *Store) Timeline(service, cluster, endpoint, asked string, holders []xdsdebug.Holding) Timeline {
	tl := Timeline{Service: service, Cluster: cluster, Endpoint: endpoint, Events: []Event{}}
	changes := s.Changes(service)
	pods := map[string]bool{}
	for _, c := range changes {
		eps := c.touching(endpoint)
		if endpoint != "" && len(eps) == 0 && !(c.Unlisted > 0) {
			continue
		}
		tl.Events = append(tl.Events, c.events(cluster, endpoint, eps)...)
		for _, e := range eps {
			if e.Pod != "" {
				pods[e.Pod] = true
			}
		}
	}
	// A Pod's events go first, so that at an equal time they come before what they caused.
	var podEvents []Event
	for _, pod := range slices.Sorted(maps.Keys(pods)) {
		if end, ok := s.PodEnd(pod); ok {
			if !end.Deleting.IsZero() {
				podEvents = append(podEvents, Event{end.Deleting, fmt.Sprintf("Pod %s seen being deleted (its deletion timestamp set)", pod)})
			}
			if !end.Gone.IsZero() {
				podEvents = append(podEvents, Event{goneBy(end.Gone, pod, changes), fmt.Sprintf("Pod %s seen gone (deleted)", pod)})
			}
		}
	}
	tl.Events = append(podEvents, tl.Events...)
	slices.SortStableFunc(tl.Events, func(a, b Event) int { return a.At.Compare(b.At) })
	tl.Proxies = proxiesOf(changes, cluster, asked, holders)
	return tl
}

// goneBy is when a Pod went, as the timeline tells it: the store stamps it when its handler of
// the Pods sees the deletion, which may run after the handler of the endpoints has recorded the
// recomputation the deletion caused (they are separate goroutines). So it is no later than a
// recomputation without a new EndpointSlice version, computed within a second before it, that
// removed an endpoint of the Pod.
func goneBy(gone time.Time, pod string, changes []Change) time.Time {
	for _, c := range changes {
		if !c.Again || !c.Computed.Before(gone) || gone.Sub(c.Computed) > time.Second {
			continue
		}
		if slices.ContainsFunc(c.Removed, func(e Endpoint) bool { return e.Pod == pod }) {
			gone = c.Computed
		}
	}
	return gone
}

// touching is the endpoints of the change at address (all: every endpoint listed).
func (c *Change) touching(address string) []Endpoint {
	var out []Endpoint
	for _, l := range [][]Endpoint{c.Added, c.Removed, c.Health} {
		for _, e := range l {
			if address == "" || e.Address == address {
				out = append(out, e)
			}
		}
	}
	return out
}

// events are a change's moments: the change behind it, when krteds saw it, computed it, and when
// the proxies acknowledged or rejected it.
func (c *Change) events(cluster, endpoint string, eps []Endpoint) []Event {
	var out []Event
	cause := c.Cause
	what := describe(c, eps)
	if endpoint != "" && len(eps) == 0 {
		what = fmt.Sprintf("%d endpoints changed that the record does not list; %s may be among them", c.Unlisted, endpoint)
	}
	if cause.Trigger > 0 && !c.Again {
		out = append(out, Event{time.Unix(0, cause.Trigger), triggerText(cause)})
	}
	if cause.Seen > 0 && !c.Again {
		rv := ""
		if cause.Version != "" {
			rv = " resourceVersion " + cause.Version
		}
		out = append(out, Event{time.Unix(0, cause.Seen), fmt.Sprintf("%s %s%s seen by krteds", cause.Kind, cause.Name, rv)})
	}
	computed := fmt.Sprintf("change %d computed: %s", c.Seq, what)
	if c.Again {
		computed = fmt.Sprintf("change %d computed again without a new %s version (a Pod arrived or went, or a policy or proxy class changed): %s", c.Seq, orNone(cause.Kind), what)
	}
	if v := c.CLAs[cluster]; len(v) > 0 {
		computed += "; CLA " + versions(v)
	}
	out = append(out, Event{c.Computed, computed})
	d := c.Delivery
	if d.Acked > 0 {
		out = append(out, Event{d.LastAck, fmt.Sprintf("change %d acknowledged by %s (the first at %s, the last handed to gRPC at %s)",
			c.Seq, proxies(d.Acked), clock(d.FirstAck), clock(d.LastHanded))})
	}
	for _, r := range d.Rejections {
		out = append(out, Event{r.At, fmt.Sprintf("proxy %s rejected change %d: %s", r.NodeID, c.Seq, r.Error)})
	}
	if n := d.Rejected - len(d.Rejections); n > 0 {
		out = append(out, Event{d.Rejections[len(d.Rejections)-1].At, fmt.Sprintf("and %s more rejected change %d", proxies(n), c.Seq)})
	}
	return out
}

// triggerText says what the trigger time of an input change is.
func triggerText(c collections.Cause) string {
	switch c.Kind {
	case "EndpointSlice":
		return fmt.Sprintf("EndpointSlice %s: the Pod or Service change behind it (its trigger time)", c.Name)
	case "Pod":
		return fmt.Sprintf("Pod %s: its readiness changed (its Ready condition's transition time)", c.Name)
	}
	return fmt.Sprintf("%s %s changed", c.Kind, c.Name)
}

// proxies is "1 proxy" or "n proxies".
func proxies(n int) string {
	if n == 1 {
		return "1 proxy"
	}
	return fmt.Sprintf("%d proxies", n)
}

// describe says what a change did to the endpoints listed.
func describe(c *Change, eps []Endpoint) string {
	if len(eps) == 0 && c.Unlisted == 0 {
		if c.Updated > 0 {
			return fmt.Sprintf("%d endpoints' port or metadata changed", c.Updated)
		}
		return "no endpoint changed"
	}
	var parts []string
	for _, e := range eps {
		at := fmt.Sprintf("%s:%d", e.Address, e.Port)
		if e.Pod != "" {
			at += " (Pod " + e.Pod + ")"
		}
		switch {
		case slices.Contains(c.Added, e):
			parts = append(parts, at+" added, "+e.Health.String())
		case slices.Contains(c.Removed, e):
			parts = append(parts, at+" removed")
		default:
			parts = append(parts, fmt.Sprintf("%s %s → %s", at, e.From, e.Health))
		}
	}
	if len(eps) == 0 {
		parts = append(parts, fmt.Sprintf("%d endpoints changed", c.Unlisted))
	}
	return strings.Join(parts, ", ")
}

// versions writes a CLA's versions by class.
func versions(v map[string]uint64) string {
	keys := make([]string, 0, len(v))
	for k := range v {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		if k == "" {
			parts = append(parts, fmt.Sprintf("%x", v[k]))
		} else {
			parts = append(parts, fmt.Sprintf("%x (class %s)", v[k], k))
		}
	}
	return strings.Join(parts, ", ")
}

// proxiesOf is where the holders stand against the record of the cluster's CLAs.
func proxiesOf(changes []Change, cluster, asked string, holders []xdsdebug.Holding) Proxies {
	ps := Proxies{Subscribed: len(holders)}
	for _, h := range holders {
		lag := ProxyLag{NodeID: h.NodeID, ConnID: h.ConnID, Holds: h.Sent, Acked: h.Acked, Current: h.Current,
			Changes: changesSince(changes, cluster, h.Sent), LastError: h.LastError, Behind: h.Behind}
		if h.ConnID == asked {
			a := lag
			ps.Asked = &a
		}
		switch {
		case h.Sent == h.Current && h.Acked:
			ps.Current++
		case h.Sent == h.Current:
			ps.Sending++
		case len(ps.Behind) < maxBehindListed:
			ps.Behind = append(ps.Behind, lag)
		default:
			ps.Unlisted++
		}
	}
	return ps
}

// changesSince counts the recorded changes of a cluster's CLA after the one that produced
// version v (-1: v is not in the record).
func changesSince(changes []Change, cluster string, v uint64) int {
	for i := len(changes) - 1; i >= 0; i-- {
		for _, got := range changes[i].CLAs[cluster] {
			if got == v {
				n := 0
				for _, c := range changes[i+1:] {
					if c.CLAs[cluster] != nil {
						n++
					}
				}
				return n
			}
		}
	}
	return -1
}

func clock(t time.Time) string { return t.Format("15:04:05.000000") }

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}

// Text writes a timeline for a terminal.
func (tl Timeline) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "history of %s (service %s)", tl.Cluster, tl.Service)
	if tl.Endpoint != "" {
		fmt.Fprintf(&b, ", endpoint %s", tl.Endpoint)
	}
	b.WriteString("\n")
	if len(tl.Events) == 0 {
		b.WriteString("  no change recorded\n")
	}
	for _, e := range tl.Events {
		fmt.Fprintf(&b, "  %s  %s\n", e.At.Format("15:04:05.000000"), e.Text)
	}
	p := tl.Proxies
	fmt.Fprintf(&b, "now: %s subscribed to the cluster; holding its current CLA: %d; sent it, not acknowledged yet: %d; behind: %d\n",
		proxies(p.Subscribed), p.Current, p.Sending, len(p.Behind)+p.Unlisted)
	if p.Asked != nil {
		fmt.Fprintf(&b, "  asked: %s\n", p.Asked.Text())
	}
	for _, l := range p.Behind {
		fmt.Fprintf(&b, "  %s\n", l.Text())
	}
	if p.Unlisted > 0 {
		fmt.Fprintf(&b, "  and %d more behind\n", p.Unlisted)
	}
	return b.String()
}

// Text says what a proxy holds and why, in a line.
func (l ProxyLag) Text() string {
	var b strings.Builder
	fmt.Fprintf(&b, "proxy %s (%s) ", l.NodeID, l.ConnID)
	switch {
	case l.Holds == 0:
		b.WriteString("holds no CLA of the cluster")
	case l.Holds == l.Current && l.Acked:
		fmt.Fprintf(&b, "holds the current CLA %x", l.Holds)
	case l.Holds == l.Current:
		fmt.Fprintf(&b, "was sent the current CLA %x and has not acknowledged it", l.Holds)
	default:
		fmt.Fprintf(&b, "holds CLA %x, current is %x", l.Holds, l.Current)
		if l.Changes >= 0 {
			fmt.Fprintf(&b, " (%d changes behind)", l.Changes)
		}
	}
	if bh := l.Behind; bh != nil {
		fmt.Fprintf(&b, "; behind on endpoints for %s: %s", time.Since(bh.Since).Round(time.Millisecond), bh.Reason)
		if bh.Lane != "" {
			fmt.Fprintf(&b, " (%s lane)", bh.Lane)
		}
	}
	if l.LastError != "" {
		fmt.Fprintf(&b, "; last rejection: %s", l.LastError)
	}
	return b.String()
}
