package xdsdebug

import (
	"slices"
	"strings"
	"time"
)

// Staleness is /debug/staleness: every proxy the scope sees that is behind what krteds would
// send it, per type, oldest first.
type Staleness struct {
	// Proxies counts the identified proxies the scope sees; Behind lists the types behind, Stale
	// counts those behind for longer than the server's stale threshold.
	Proxies int          `json:"proxies"`
	Stale   int          `json:"stale"`
	Behind  []TypeBehind `json:"behind"`
}

// TypeBehind is one proxy behind on one type.
type TypeBehind struct {
	Proxy  string `json:"proxy"`
	ConnID string `json:"connectionId"`
	Type   string `json:"type"`
	Behind
	// Seconds is how long it has been behind, when asked.
	Seconds float64 `json:"seconds"`
	// The exchange of the type: the versions last sent and acknowledged, the last rejection.
	SentVersion  string `json:"sentVersion,omitempty"`
	AckedVersion string `json:"ackedVersion,omitempty"`
	LastError    string `json:"lastError,omitempty"`
}

// Staleness lists the proxies the scope sees that are behind, oldest first (onlyStale: only
// those past the threshold).
func (d *Debug) Staleness(scope Scope, onlyStale bool) Staleness {
	out := Staleness{Behind: []TypeBehind{}}
	now := time.Now()
	for _, c := range d.Statuses(scope, false) {
		out.Proxies++
		for t, ts := range c.Types {
			b := ts.Behind
			if b == nil || (onlyStale && !b.Stale) {
				continue
			}
			if b.Stale {
				out.Stale++
			}
			id := ""
			if c.Proxy != nil {
				id = c.Proxy.ID
			}
			out.Behind = append(out.Behind, TypeBehind{Proxy: id, ConnID: c.ConnID, Type: t, Behind: *b,
				Seconds: now.Sub(b.Since).Seconds(), SentVersion: ts.SentVersion, AckedVersion: ts.AckedVersion, LastError: ts.LastError})
		}
	}
	slices.SortFunc(out.Behind, func(a, b TypeBehind) int {
		if c := a.Since.Compare(b.Since); c != 0 {
			return c
		}
		if c := strings.Compare(a.ConnID, b.ConnID); c != 0 {
			return c
		}
		return strings.Compare(a.Type, b.Type)
	})
	return out
}
