package collections

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// ServiceSetting is one entry of mesh config's serviceSettings: hosts (exact, or a wildcard: a
// leading "*") and whether their endpoints are cluster-local.
type ServiceSetting struct {
	Hosts        []string
	ClusterLocal bool
}

// DefaultDiscoveryAddress is the discovery address a default install's mesh config gives
// proxies (istiod's chart writes istiod.<its namespace>.svc:15012; istiod's own fallback,
// without a mesh config, is the istio-system one).
func DefaultDiscoveryAddress(systemNamespace string) string {
	return "istiod." + systemNamespace + ".svc:15012"
}

// ClusterLocalHosts says which hostnames are cluster-local, as istiod's model.ClusterLocalHosts:
// exact hostnames and wildcards, each with its setting; an exact entry wins, else the longest
// matching wildcard (the most specific), else the host is not cluster-local. The zero value has
// no entries.
type ClusterLocalHosts struct {
	specific map[string]bool
	wildcard map[string]bool
}

// NewClusterLocalHosts builds the cluster-local hosts as istiod's
// clusterLocalProvider.onMeshUpdated does: the defaults are *.kube-system.svc.<domain>,
// kubernetes.default.svc.<domain> and the host of the discovery address (with .<domain> added
// unless it ends in the domain); each setting's hosts take its clusterLocal value (a later
// setting of a host overrides an earlier one), and a host set false removes every default it
// names or falls under (a wildcard default covering it). The error says why the discovery
// address gave no host; the rest is built without it, as istiod logs the error and goes on.
func NewClusterLocalHosts(domain, discoveryAddress string, settings []ServiceSetting) (ClusterLocalHosts, error) {
	defaults := []string{"*.kube-system.svc." + domain, "kubernetes.default.svc." + domain}
	discoveryHost, err := discoveryHostOf(discoveryAddress)
	if err == nil {
		if !strings.HasSuffix(discoveryHost, domain) {
			discoveryHost += "." + domain
		}
		defaults = append(defaults, discoveryHost)
	}
	c := ClusterLocalHosts{specific: map[string]bool{}, wildcard: map[string]bool{}}
	for _, s := range settings {
		for _, h := range s.Hosts {
			if !s.ClusterLocal {
				for i, d := range defaults {
					if d != "" && (h == d || (isWildcard(d) && strings.HasSuffix(h, d[1:]))) {
						defaults[i] = "" // explicitly not cluster-local
					}
				}
			}
			c.set(h, s.ClusterLocal)
		}
	}
	for _, d := range defaults {
		if d != "" {
			c.set(d, true)
		}
	}
	return c, err
}

func (c ClusterLocalHosts) set(h string, local bool) {
	if isWildcard(h) {
		c.wildcard[h] = local
	} else {
		c.specific[h] = local
	}
}

// IsClusterLocal reports whether a hostname's endpoints are each proxy's own cluster's only.
func (c ClusterLocalHosts) IsClusterLocal(hostname string) bool {
	if local, ok := c.specific[hostname]; ok {
		return local
	}
	best, local := -1, false
	for w, l := range c.wildcard {
		if suffix := w[1:]; len(suffix) > best && strings.HasSuffix(hostname, suffix) {
			// Two matching wildcards of one length are the same suffix of hostname: the
			// longest is the one most specific match.
			best, local = len(suffix), l
		}
	}
	return local
}

// Hosts lists the entries: the cluster-local hosts, then those set not to be, each sorted.
func (c ClusterLocalHosts) Hosts() []ServiceSetting {
	var local, notLocal []string
	for _, m := range []map[string]bool{c.specific, c.wildcard} {
		for h, l := range m {
			if l {
				local = append(local, h)
			} else {
				notLocal = append(notLocal, h)
			}
		}
	}
	var out []ServiceSetting
	if len(local) > 0 {
		slices.Sort(local)
		out = append(out, ServiceSetting{Hosts: local, ClusterLocal: true})
	}
	if len(notLocal) > 0 {
		slices.Sort(notLocal)
		out = append(out, ServiceSetting{Hosts: notLocal})
	}
	return out
}

// isWildcard is istiod's host.Name.IsWildCarded: a leading "*".
func isWildcard(h string) bool { return strings.HasPrefix(h, "*") }

// discoveryHostOf is istiod's Environment.GetDiscoveryAddress: the host of "host:port", the
// port a number.
func discoveryHostOf(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("discovery address %q: %w", addr, err)
	}
	if _, err := strconv.Atoi(port); err != nil {
		return "", fmt.Errorf("discovery address %q: port %q is not a number", addr, port)
	}
	return host, nil
}
