package policy

import (
	"maps"
	"slices"
	"strings"

	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/config/labels"
	"istio.io/istio/pkg/config/protocol"
	"istio.io/istio/pkg/config/validation"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// KindSidecar is the Problem kind of Sidecars.
const KindSidecar = "Sidecar"

// Visible reports whether a proxy in proxyNamespace, scoped by the egress listeners of its
// Sidecar (SidecarFor; nil for none), has a service (vis: ServiceInfo.Visibility) in its sidecar
// scope, so that istiod would serve the service's endpoints to it: the service must be exported
// to the proxy's namespace (serviceExportedTo) and imported by a listener (sidecarImports). A
// resource of one of the service's ports (a cluster, its CLA; vis: ServiceInfo.PortVisibility)
// is visible when a listener that imports the service admits that port, as istiod's sidecar
// scope keeps only the ports its listeners match.
func Visible(vis collections.Visibility, proxyNamespace string, egress []collections.EgressListener) bool {
	if !serviceExportedTo(vis, proxyNamespace) {
		return false
	}
	if egress == nil {
		return true
	}
	for _, l := range egress {
		if (l.Port == 0 || len(vis.Ports) == 0 || slices.Contains(vis.Ports, l.Port)) && sidecarImports(l.Hosts, proxyNamespace, vis) {
			return true
		}
	}
	return false
}

// serviceExportedTo applies the Service's networking.istio.io/exportTo annotation as istiod's
// service index does: no annotation → everywhere (the mesh default, "*"); "*" anywhere in the
// list → everywhere; otherwise "~" anywhere → nowhere, not even its own namespace; otherwise "."
// is the Service's namespace and the other entries are namespaces.
func serviceExportedTo(vis collections.Visibility, namespace string) bool {
	if len(vis.ExportTo) == 0 || slices.Contains(vis.ExportTo, "*") {
		return true
	}
	if slices.Contains(vis.ExportTo, "~") {
		return false
	}
	for _, e := range vis.ExportTo {
		if e == "." {
			e = vis.Namespace
		}
		if e == namespace {
			return true
		}
	}
	return false
}

// sidecarImports applies Sidecar egress hosts "<namespace>/<host>" to a service, as istiod's
// egress listeners select services:
//   - namespace: a name, "." (the proxy's namespace) or "*" (any); "~<namespace>", "~." or
//     "~*" exclude the host from that namespace, and a bare "~" excludes it from every namespace;
//   - host: "*", "*.<suffix>" or an exact hostname.
//
// A service is imported when no exclusion in its namespace or in "*" covers its hostname and an
// entry of its namespace or of "*" does. No hosts (no Sidecar, or a Sidecar without egress
// listeners, which istiod reads as "*/*") import everything. Entries not of the form ns/host
// are ignored, as istiod ignores them.
//
// These are the hosts of one egress listener: a Sidecar imports a service when one of its
// listeners does (Visible), each with its own exclusions, as istiod selects services per
// listener.
func sidecarImports(egressHosts []string, proxyNamespace string, svc collections.Visibility) bool {
	if len(egressHosts) == 0 {
		return true
	}
	imported := false
	for _, h := range egressHosts {
		if strings.Count(h, "/") != 1 {
			continue
		}
		ns, host, _ := strings.Cut(h, "/")
		excluded := strings.HasPrefix(ns, "~")
		if excluded {
			ns = ns[1:]
			if ns == "" {
				ns = "*"
			}
		}
		if ns == "." {
			ns = proxyNamespace
		}
		if (ns != "*" && ns != svc.Namespace) || !egressHostCovers(host, svc.Hostname) {
			continue
		}
		if excluded {
			return false
		}
		imported = true
	}
	return imported
}

// egressHostCovers reports whether an egress host ("*", "*.suffix" or exact) covers a hostname.
func egressHostCovers(host, hostname string) bool {
	if strings.HasPrefix(host, "*") {
		return strings.HasSuffix(hostname, host[1:])
	}
	return host == hostname
}

// SidecarFor picks the Sidecar of a proxy as istiod does: in the proxy's namespace, the oldest
// Sidecar whose workloadSelector matches the proxy's labels (an empty selector matches every
// workload), else the oldest one without a selector; otherwise the oldest Sidecar without a
// selector in the root namespace; otherwise nil. Oldest means by CreationTime, then name.
func SidecarFor(sidecars []collections.Sidecar, proxyNamespace string, proxyLabels map[string]string, rootNamespace string) *collections.Sidecar {
	var bySelector, plain, root *collections.Sidecar
	older := func(a, b *collections.Sidecar) bool {
		return b == nil || transforms.CompareCreation(a.CreationTime, b.CreationTime, a.Name, b.Name, a.Namespace, b.Namespace) < 0
	}
	for i := range sidecars {
		s := &sidecars[i]
		switch {
		case s.Namespace == proxyNamespace && s.WorkloadSelector != nil:
			if labelsSubset(s.WorkloadSelector, proxyLabels) && older(s, bySelector) {
				bySelector = s
			}
		case s.Namespace == proxyNamespace:
			if older(s, plain) {
				plain = s
			}
		case s.Namespace == rootNamespace && s.WorkloadSelector == nil:
			if older(s, root) {
				root = s
			}
		}
	}
	switch {
	case bySelector != nil:
		return bySelector
	case plain != nil:
		return plain
	}
	return root
}

func labelsSubset(sel, l map[string]string) bool {
	return labels.Instance(sel).SubsetOf(l)
}

// ConvertSidecar copies the workload selector and the egress hosts of a Sidecar (see
// collections.Sidecar). A Sidecar istiod's validation (pkg/config/validation ValidateSidecar,
// used as is) rejects is reported as ReasonInvalidSidecar and ignored (nil).
func ConvertSidecar(sc *networkingclient.Sidecar) (*collections.ObjectProblems, *collections.Sidecar) {
	if sc == nil {
		return nil, nil
	}
	spec := &sc.Spec
	pr, ok := transforms.Validated(KindSidecar, sc.ObjectMeta, spec, validation.ValidateSidecar, collections.ReasonInvalidSidecar)
	if !ok {
		return pr.Result(), nil
	}
	var egress []collections.EgressListener
	for _, e := range spec.Egress {
		var l collections.EgressListener
		for _, h := range e.GetHosts() {
			if !slices.Contains(l.Hosts, h) {
				l.Hosts = append(l.Hosts, h)
			}
		}
		// istiod's needsPortMatch: a listener with a port imports the services that have it,
		// unless it is a generic HTTP proxy.
		if p := e.GetPort(); p.GetNumber() != 0 && protocol.Parse(p.GetProtocol()) != protocol.HTTP_PROXY {
			l.Port = p.GetNumber()
		}
		egress = append(egress, l)
	}
	out := &collections.Sidecar{
		Name:         sc.Name,
		Namespace:    sc.Namespace,
		CreationTime: sc.CreationTimestamp.Time,
		Egress:       egress,
	}
	if sel := spec.GetWorkloadSelector(); sel != nil {
		out.WorkloadSelector = maps.Clone(sel.GetLabels())
		if out.WorkloadSelector == nil {
			out.WorkloadSelector = map[string]string{}
		}
	}
	return nil, out
}
