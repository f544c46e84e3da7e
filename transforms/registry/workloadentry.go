package registry

import (
	"fmt"
	"maps"
	"net/netip"
	"strconv"
	"strings"

	networking "istio.io/api/networking/v1alpha3"
	networkingclient "istio.io/client-go/pkg/apis/networking/v1"
	"istio.io/istio/pkg/kube/krt"
	kubelabels "istio.io/istio/pkg/kube/labels"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// WorkloadEntries converts WorkloadEntries as istiod's serviceentry registry does: labels are the
// spec's with the object's own on top; an entry whose health checks are enabled
// (proxy.istio.io/health-checks-enabled: "true") is left out until its Healthy condition is True.
// An entry without a usable address is reported and left out.
func WorkloadEntries(cfg collections.Config, systemNetwork krt.Singleton[string]) transforms.Checked[*networkingclient.WorkloadEntry, collections.WorkloadEntry] {
	return transforms.Checked[*networkingclient.WorkloadEntry, collections.WorkloadEntry]{Reads: []any{systemNetwork}, Fn: func(ctx krt.HandlerContext, we *networkingclient.WorkloadEntry) (*collections.ObjectProblems, *collections.WorkloadEntry) {
		if !workloadEntryHealthy(we) {
			return nil, nil
		}
		pr := &transforms.Problems{Kind: "WorkloadEntry", Object: we.Namespace + "/" + we.Name}
		labels := maps.Clone(we.Spec.Labels)
		if len(we.Labels) > 0 {
			if labels == nil {
				labels = map[string]string{}
			}
			maps.Copy(labels, we.Labels)
		}
		// istiod names it from the entry's own metadata labels, not its spec's.
		workloadName := kubelabels.WorkloadNameFromWorkloadEntry(we.Name, we.Annotations, we.Labels)
		out, issues := ConvertWorkloadEntry(cfg, we.Name, we.Namespace, workloadName, &we.Spec, labels, func() string {
			return FetchSystemNetwork(ctx, systemNetwork)
		})
		for _, i := range issues {
			pr.Add(i.reason, i.detail)
		}
		return pr.Result(), out
	}}
}

// workloadEntryHealthy is istiod's isHealthy: without health checks an entry is healthy; with
// them, only when its Healthy condition is True.
func workloadEntryHealthy(we *networkingclient.WorkloadEntry) bool {
	if on, err := strconv.ParseBool(we.Annotations[collections.AnnotationHealthChecksEnabled]); err != nil || !on {
		return true
	}
	for _, c := range we.Status.Conditions {
		if c != nil && c.Type == collections.ConditionHealthy {
			return c.Status == "True"
		}
	}
	return false
}

// ConvertWorkloadEntry builds a WorkloadEntry (or a ServiceEntry's inline endpoint) as istiod's
// convertWorkloadEntryToWorkloadInstance: the network is the entry's, else its
// topology.istio.io/network label, else the default network (read only then); the locality is
// the entry's, else its locality label; the identity comes from its service account, and the
// tlsMode is its security.istio.io/tlsMode label, else "istio" with a service account, else
// "disabled". The entry is nil when its address cannot be served; a port number out of range is
// left out of its ports. Either is one issue.
func ConvertWorkloadEntry(cfg collections.Config, name, namespace, workloadName string, spec *networking.WorkloadEntry,
	labels map[string]string, systemNetwork func() string,
) (*collections.WorkloadEntry, []issue) {
	out := &collections.WorkloadEntry{Name: name, Namespace: namespace, Ports: spec.Ports}
	var issues []issue
	for n, p := range spec.Ports {
		if p < 1 || p > 65535 {
			issues = append(issues, issue{collections.ReasonInvalidPort, fmt.Sprintf("port %q number %d is out of range; left out", n, p)})
			if len(out.Ports) == len(spec.Ports) {
				out.Ports = maps.Clone(spec.Ports)
			}
			delete(out.Ports, n)
		}
	}
	addr := spec.Address
	switch {
	case addr == "":
		return nil, append(issues, issue{collections.ReasonInvalidAddress, "no address; entry ignored"})
	case strings.HasPrefix(addr, "unix://"):
		return nil, append(issues, issue{collections.ReasonInvalidAddress, fmt.Sprintf("address %q is a unix socket, which krteds does not serve; entry ignored", addr)})
	}
	if ip, err := netip.ParseAddr(addr); err == nil {
		if ip.Zone() != "" {
			return nil, append(issues, issue{collections.ReasonInvalidAddress, fmt.Sprintf("address %q has a zone; entry ignored", addr)})
		}
		out.Address = ip.String()
	} else {
		// A hostname: only DNS-resolved ServiceEntries use it.
		out.Address, out.DNSOnly = addr, true
	}
	label := func(k string) string { return labels[k] }
	localityLabel, locality := spec.Locality, collections.ParseLocality(spec.Locality)
	if localityLabel == "" {
		localityLabel, locality = PodLocality(label)
	}
	network := spec.Network
	if network == "" {
		network = labels[collections.LabelTopologyNetwork]
	}
	if network == "" {
		network = systemNetwork()
	}
	tlsMode := collections.TLSModeDisabled
	if v, ok := labels[collections.LabelTLSMode]; ok {
		tlsMode = v
	} else if spec.ServiceAccount != "" {
		tlsMode = collections.TLSModeIstio
	}
	identity := ""
	if spec.ServiceAccount != "" {
		identity = internedIdentity(cfg.TrustDomain, namespace, spec.ServiceAccount)
	}
	canonicalName, canonicalRevision := canonicalService(func(k string) (string, bool) { v, ok := labels[k]; return v, ok }, workloadName)
	out.Meta = collections.NewEndpointMeta(
		collections.WorkloadMeta{
			PodLabels:         collections.InternLabels(labels),
			ServiceAccount:    identity,
			TLSMode:           tlsMode,
			Namespace:         namespace,
			WorkloadName:      workloadName,
			CanonicalName:     canonicalName,
			CanonicalRevision: canonicalRevision,
			Weight:            spec.Weight,
		},
		collections.TopologyMeta{
			LocalityLabel: localityLabel,
			Locality:      locality,
			ClusterID:     cfg.ClusterID,
			Network:       network,
		},
		"", "")
	return out, issues
}

// issue is one problem found in an object, with its reason.
type issue struct{ reason, detail string }
