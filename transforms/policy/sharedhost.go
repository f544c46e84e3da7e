package policy

import (
	"cmp"
	"slices"
	"strings"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// One hostname, several namespaces: ServiceEntries of several namespaces may define the same
// host, and istiod keeps one service per (host, namespace), each proxy's sidecar scope seeing
// one of them. krteds builds every namespace's resources, keyed apart (SetKey), and resolves a
// name for a proxy to the namespace PickHostNamespace gives.

// ownerSep separates the namespace of a shared host's service from the key of one of its
// resource sets: '@' is in no namespace, hostname, cluster name or key krteds makes.
const ownerSep = "@"

// SetKey is the key of a resource set of svc: key itself, or, when ServiceEntries of other
// namespaces define the service's hostname too, "<namespace>@<key>".
func SetKey(svc *collections.ServiceInfo, key string) string {
	if svc.SharedHost {
		return OwnedKey(svc.Namespace, key)
	}
	return key
}

// OwnedKey is the key of the resource set key of namespace's service of a shared hostname.
func OwnedKey(namespace, key string) string { return namespace + ownerSep + key }

// SplitSetKey splits a resource set's key into the namespace of the shared host's service it
// belongs to ("" for a set of any other service) and the key within the service.
func SplitSetKey(key string) (namespace, rest string) {
	if ns, rest, ok := strings.Cut(key, ownerSep); ok {
		return ns, rest
	}
	return "", key
}

// SharedHostKey is the extractor of an index of the services whose hostname several
// namespaces define, by hostname.
func SharedHostKey(svc *collections.ServiceInfo) []string {
	if !svc.SharedHost {
		return nil
	}
	return []string{svc.Hostname}
}

// HostOfName is the hostname a resource name of a type is about: a cluster's, a route
// configuration's or a CLA's (outbound|<port>|<subset>|<host>), a listener's (<host>:<port>).
func HostOfName(typeURL, name string) string {
	if typeURL == transforms.TypeListener {
		if i := strings.LastIndexByte(name, ':'); i > 0 {
			return name[:i]
		}
		return ""
	}
	_, _, host, ok := transforms.ParseClusterName(name)
	if !ok {
		return ""
	}
	return host
}

// PickHostNamespace is the namespace whose service of a hostname a proxy is sent, among the
// services of several namespaces with that hostname, as istiod's sidecar scope picks it
// (convertIstioListenerToWrapper and selectServices, PILOT_UNIFIED_SIDECAR_SCOPE on, as by
// default):
//   - a candidate must be exported to the proxy's namespace and imported by its Sidecar's egress
//     hosts (Visible);
//   - the proxy's own namespace's service wins;
//   - else the first in istiod's order of the services: when every egress host is an exact host
//     of a named namespace, the services by creation (servicesForExactHosts); otherwise
//     (no Sidecar: "*/*") those exported to the proxy's namespace by name first, then the public
//     ones, each by creation (servicesExportedToNamespace). Creation ties go to the lower
//     namespace (SortServicesByCreationTime).
//
// "" when the proxy sees none.
func PickHostNamespace(candidates []*collections.ServiceInfo, v *collections.View) string {
	var visible []*collections.ServiceInfo
	for _, s := range candidates {
		if !Visible(s.Visibility(), v.Namespace, v.Egress) {
			continue
		}
		if s.Namespace == v.Namespace {
			return s.Namespace
		}
		visible = append(visible, s)
	}
	if len(visible) == 0 {
		return ""
	}
	exact := exactEgress(v.Egress)
	first := slices.MinFunc(visible, func(a, b *collections.ServiceInfo) int {
		if !exact {
			// Exported to the namespace by name (no "*"): istiod's exportedToNamespace list,
			// before the public list.
			if c := cmp.Compare(publicRank(a.ExportTo), publicRank(b.ExportTo)); c != 0 {
				return c
			}
		}
		return cmp.Or(a.Created.Compare(b.Created), strings.Compare(a.Namespace, b.Namespace))
	})
	return first.Namespace
}

// publicRank is 1 for a service exported everywhere (istiod's ServiceIndex.public; no exportTo is
// the mesh default, "*"), 0 for one exported to namespaces by name.
func publicRank(exportTo []string) int {
	if len(exportTo) == 0 || slices.Contains(exportTo, "*") {
		return 1
	}
	return 0
}

// exactEgress is istiod's allExactHosts over a Sidecar's egress hosts (all its listeners'
// together): some, and every host that imports (not a "~" exclusion) is an exact hostname of a
// named namespace ("." is the proxy's). No Sidecar is "*/*".
func exactEgress(egress []collections.EgressListener) bool {
	if len(egress) == 0 {
		return false
	}
	for _, h := range allHosts(egress) {
		if strings.Count(h, "/") != 1 {
			continue // ignored, as istiod ignores it
		}
		ns, host, _ := strings.Cut(h, "/")
		if strings.HasPrefix(ns, "~") {
			continue
		}
		if ns == "*" || strings.HasPrefix(host, "*") {
			return false
		}
	}
	return true
}

// allHosts are the hosts of every egress listener, in order.
func allHosts(egress []collections.EgressListener) []string {
	var out []string
	for _, l := range egress {
		out = append(out, l.Hosts...)
	}
	return out
}
