package registry

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/config/protocol"
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// ServiceEntryInputs are what the ServiceEntry conversion reads.
type ServiceEntryInputs struct {
	// Namespaces give the traffic-distribution annotation fallback.
	Namespaces    krt.Collection[*corev1.Namespace]
	SystemNetwork krt.Singleton[string]
	// Entries and EntriesByHost are the ServiceEntries, and an index of them by host: an entry
	// whose ports an older entry of its namespace for one of its hosts cannot take is reported.
	Entries       krt.Collection[*networkingclient.ServiceEntry]
	EntriesByHost krt.Index[string, *networkingclient.ServiceEntry]
}

// ServiceEntryHosts is the extractor of the ServiceEntries-by-host index.
func ServiceEntryHosts(se *networkingclient.ServiceEntry) []string { return se.Spec.Hosts }

// EntryHosts is the extractor of the converted ServiceEntries by host.
func EntryHosts(se collections.ServiceEntry) []string { return se.Hosts }

// ServiceEntries converts ServiceEntries as istiod's convertServices and
// convertServiceEntryToInstances do, with what krteds cannot serve reported and left out: a
// wildcard or single-label host, a host under the cluster's service domain, a port without a
// valid number or with a number already used, resolution DYNAMIC_DNS, and an inline endpoint
// that cannot be served (a hostname under STATIC). A host an older entry of the namespace
// defines with settings this one's ports cannot be merged under is reported
// (EntryHostServices merges the rest).
func ServiceEntries(cfg collections.Config, in ServiceEntryInputs) transforms.Checked[*networkingclient.ServiceEntry, collections.ServiceEntry] {
	return transforms.Checked[*networkingclient.ServiceEntry, collections.ServiceEntry]{Reads: []any{in.Namespaces, in.SystemNetwork, in.Entries}, Fn: func(ctx krt.HandlerContext, se *networkingclient.ServiceEntry) (*collections.ObjectProblems, *collections.ServiceEntry) {
		pr := &transforms.Problems{Kind: "ServiceEntry", Object: se.Namespace + "/" + se.Name}
		spec := &se.Spec
		out := &collections.ServiceEntry{Name: se.Name, Namespace: se.Namespace, Created: se.CreationTimestamp.Time, Labels: se.Labels,
			MeshExternal: spec.Location == networking.ServiceEntry_MESH_EXTERNAL}
		switch spec.Resolution {
		case networking.ServiceEntry_NONE:
			out.Resolution = collections.Passthrough
		case networking.ServiceEntry_STATIC:
			out.Resolution = collections.ClientSideLB
		case networking.ServiceEntry_DNS:
			out.Resolution = collections.DNSLB
		case networking.ServiceEntry_DNS_ROUND_ROBIN:
			out.Resolution = collections.DNSRoundRobinLB
		default:
			pr.Add(collections.ReasonUnsupported, fmt.Sprintf("resolution %s is not served; entry ignored", spec.Resolution))
			return pr.Result(), nil
		}
		for _, h := range spec.Hosts {
			if reason := hostProblem(cfg, h); reason != "" {
				pr.Add(collections.ReasonInvalidHost, fmt.Sprintf("host %q: %s; host ignored", h, reason))
				continue
			}
			if !slices.Contains(out.Hosts, h) {
				out.Hosts = append(out.Hosts, h)
			}
		}
		for i, p := range spec.Ports {
			if p == nil {
				continue
			}
			switch {
			case p.Number < 1 || p.Number > 65535:
				pr.Add(collections.ReasonInvalidPort, fmt.Sprintf("port %d (%q) number %d is out of range; skipped", i, p.Name, p.Number))
				continue
			case slices.ContainsFunc(out.Ports, func(o collections.ServicePort) bool { return o.Port == int32(p.Number) }):
				pr.Add(collections.ReasonInvalidPort, fmt.Sprintf("port %d (%q) number %d is used twice; skipped", i, p.Name, p.Number))
				continue
			}
			sp := collections.ServicePort{Name: p.Name, Port: int32(p.Number), Protocol: string(corev1.ProtocolTCP), AppProtocol: p.Protocol}
			if protocol.Parse(p.Protocol) == protocol.UDP {
				sp.Protocol = string(corev1.ProtocolUDP)
			}
			if p.TargetPort > 0 && p.TargetPort <= 65535 {
				sp.TargetPort = strconv.Itoa(int(p.TargetPort))
			}
			out.Ports = append(out.Ports, sp)
		}
		if len(spec.ExportTo) > 0 {
			out.ExportTo = slices.Compact(slices.Sorted(slices.Values(spec.ExportTo)))
		}
		var nsAnnotations map[string]string
		if ns := krt.FetchOne(ctx, in.Namespaces, krt.FilterKey(se.Namespace)); ns != nil {
			nsAnnotations = (*ns).Annotations
		}
		out.TrafficDistribution = TrafficDistributionOf(nil, se.Annotations, nsAnnotations)
		if spec.WorkloadSelector != nil {
			out.Selector = maps.Clone(spec.WorkloadSelector.Labels)
			if out.Selector == nil {
				out.Selector = map[string]string{}
			}
		}
		for _, h := range out.Hosts {
			if base, unlike := unmergeable(ctx, in, se, out, h); base != "" {
				pr.Add(collections.ReasonUnsupported, fmt.Sprintf("host %q: ServiceEntry %s of this namespace defines it first, with another %s: "+
					"this entry's endpoints are the host's, its other ports are not (as istiod merges them)", h, base, unlike))
			}
		}
		if spec.WorkloadSelector != nil {
			if len(spec.Endpoints) > 0 {
				pr.Add(collections.ReasonUnsupported, "endpoints and workloadSelector are both set; the endpoints are ignored")
			}
			return pr.Result(), out
		}
		network, fetched := "", false
		systemNetwork := func() string {
			if !fetched {
				network, fetched = FetchSystemNetwork(ctx, in.SystemNetwork), true
			}
			return network
		}
		for i, e := range spec.Endpoints {
			if e == nil {
				continue
			}
			name := se.Name + "-" + strconv.Itoa(i)
			we, issues := ConvertWorkloadEntry(cfg, name, se.Namespace, name, e, e.Labels, systemNetwork)
			if we != nil && we.DNSOnly && !out.Resolution.IsDNS() {
				issues = append(issues, issue{collections.ReasonInvalidAddress,
					fmt.Sprintf("address %q is not an IP address, which resolution %s needs; endpoint ignored", e.Address, spec.Resolution)})
				we = nil
			}
			for _, is := range issues {
				pr.Add(is.reason, fmt.Sprintf("endpoint %d: %s", i, is.detail))
			}
			if we != nil {
				out.Endpoints = append(out.Endpoints, *we)
			}
		}
		return pr.Result(), out
	}}
}

// hostProblem says why an entry cannot define host ("" when it can). A host under the cluster's
// service domain would share its clusters' names with a Kubernetes Service's.
func hostProblem(cfg collections.Config, host string) string {
	switch {
	case host == "":
		return "empty"
	case strings.Contains(host, "*"):
		return "wildcard hosts get no EDS cluster"
	case !strings.Contains(host, "."):
		return "not a fully qualified domain name"
	case strings.HasSuffix(host, ".svc."+cfg.Domain):
		return "a Kubernetes Service hostname (under .svc." + cfg.Domain + ")"
	}
	return ""
}
