// Package registry derives what the clusters hold: services (from Services and ServiceEntries),
// workloads (Pods and WorkloadEntries, with their identities and localities), and each service's
// endpoints (from EndpointSlices and ServiceEntry selectors), sharded by cluster.
package registry

import (
	"fmt"
	"slices"
	"strings"

	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// KindService is the Problem kind of Services.
const KindService = "Service"

// ServiceInfos converts a Kubernetes Service into a ServiceInfo, and reports what it left
// out: a port whose number is outside 1..65535 (the API server rejects one, a manifest may carry
// one) gets no cluster, with a ReasonInvalidPort problem. It Fetches the Service's Namespace,
// whose networking.istio.io/traffic-distribution annotation is the last fallback for the traffic
// distribution.
func ServiceInfos(cfg collections.Config, namespaces krt.Collection[*corev1.Namespace]) transforms.Checked[*corev1.Service, *collections.ServiceInfo] {
	return transforms.Checked[*corev1.Service, *collections.ServiceInfo]{Reads: []any{namespaces}, Fn: func(ctx krt.HandlerContext, svc *corev1.Service) (*collections.ObjectProblems, **collections.ServiceInfo) {
		var nsAnnotations map[string]string
		if ns := krt.FetchOne(ctx, namespaces, krt.FilterKey(svc.Namespace)); ns != nil {
			nsAnnotations = (*ns).Annotations
		}
		pr := &transforms.Problems{Kind: KindService, Object: svc.Namespace + "/" + svc.Name}
		si := convertService(cfg, svc, nsAnnotations, pr)
		if si == nil {
			return pr.Result(), nil
		}
		return pr.Result(), &si
	}}
}

// ServiceHostname is <name>.<namespace>.svc.<domain>.
func ServiceHostname(name, namespace, domain string) string {
	return name + "." + namespace + ".svc." + domain
}

// ConvertService builds the ServiceInfo of a Service, given its Namespace's annotations. A port
// whose number is outside 1..65535 is left out (ServiceInfosChecked reports it).
func ConvertService(cfg collections.Config, svc *corev1.Service, nsAnnotations map[string]string) *collections.ServiceInfo {
	return convertService(cfg, svc, nsAnnotations, nil)
}

func convertService(cfg collections.Config, svc *corev1.Service, nsAnnotations map[string]string, pr *transforms.Problems) *collections.ServiceInfo {
	si := &collections.ServiceInfo{
		Name:                     svc.Name,
		Namespace:                svc.Namespace,
		Hostname:                 ServiceHostname(svc.Name, svc.Namespace, cfg.Domain),
		Labels:                   svc.Labels,
		Selector:                 svc.Spec.Selector,
		Type:                     string(svc.Spec.Type),
		PublishNotReadyAddresses: svc.Spec.PublishNotReadyAddresses,
		ExternalName:             svc.Spec.ExternalName,
		ExportTo:                 ParseExportTo(svc.Annotations[collections.AnnotationExportTo]),
		TrafficDistribution:      TrafficDistributionOf(svc.Spec.TrafficDistribution, svc.Annotations, nsAnnotations),
		HashKey:                  svc.Annotations[collections.AnnotationEndpointHashKey],
	}
	if si.Type == "" {
		si.Type = string(corev1.ServiceTypeClusterIP)
	}
	si.Cluster = cfg.ClusterID
	si.ClusterLocal = cfg.MultiCluster && cfg.IsClusterLocal(si.Hostname)
	if p := svc.Spec.InternalTrafficPolicy; p != nil && *p == corev1.ServiceInternalTrafficPolicyLocal {
		si.NodeLocal = true
	}
	_, si.PersistentSession = svc.Labels[collections.LabelPersistentSession]
	_, si.PersistentSessionHeader = svc.Labels[collections.LabelPersistentSessionHd]

	switch {
	case svc.Spec.Type == corev1.ServiceTypeExternalName && svc.Spec.ExternalName != "":
		si.Resolution = collections.Alias
	case svc.Spec.ClusterIP == corev1.ClusterIPNone:
		si.Resolution = collections.Passthrough
	default:
		si.Resolution = collections.ClientSideLB
	}
	if len(svc.Spec.ClusterIPs) > 0 {
		si.ClusterIPs = slices.Clone(svc.Spec.ClusterIPs)
	} else if svc.Spec.ClusterIP != "" {
		si.ClusterIPs = []string{svc.Spec.ClusterIP}
	}

	for i, p := range svc.Spec.Ports {
		if p.Port < 1 || p.Port > 65535 {
			if pr != nil {
				pr.Add(collections.ReasonInvalidPort, fmt.Sprintf("port %d (%q) number %d is out of range; skipped", i, p.Name, p.Port))
			}
			continue
		}
		sp := collections.ServicePort{
			Name:     p.Name,
			Port:     p.Port,
			Protocol: string(p.Protocol),
		}
		if sp.Protocol == "" {
			sp.Protocol = string(corev1.ProtocolTCP)
		}
		if p.AppProtocol != nil {
			sp.AppProtocol = *p.AppProtocol
		}
		if p.TargetPort.String() != "0" {
			sp.TargetPort = p.TargetPort.String()
		}
		si.Ports = append(si.Ports, sp)
	}
	return si
}

// ParseExportTo parses the networking.istio.io/exportTo annotation: a comma-separated list of
// namespaces, "." (own namespace), "*" (all) or "~" (none). The result is trimmed, de-duplicated
// and sorted; nil when the annotation is absent or empty.
func ParseExportTo(v string) []string {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	var out []string
	for _, e := range strings.Split(v, ",") {
		if e = strings.TrimSpace(e); e != "" {
			out = append(out, e)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TrafficDistributionOf resolves a service's traffic distribution: spec.trafficDistribution
// (PreferClose/PreferSameZone/PreferSameNode; anything else falls through), then the Service's
// networking.istio.io/traffic-distribution annotation (case-insensitive; an unknown value means
// Any), then the same annotation on the Namespace.
func TrafficDistributionOf(spec *string, svcAnnotations, nsAnnotations map[string]string) collections.TrafficDistribution {
	if spec != nil {
		switch *spec {
		case corev1.ServiceTrafficDistributionPreferClose, corev1.ServiceTrafficDistributionPreferSameZone:
			return collections.TrafficDistributionPreferSameZone
		case corev1.ServiceTrafficDistributionPreferSameNode:
			return collections.TrafficDistributionPreferSameNode
		}
	}
	for _, annotations := range []map[string]string{svcAnnotations, nsAnnotations} {
		if v := strings.ToLower(annotations[collections.AnnotationTrafficDistribution]); v != "" {
			switch v {
			case strings.ToLower(corev1.ServiceTrafficDistributionPreferClose), strings.ToLower(corev1.ServiceTrafficDistributionPreferSameZone):
				return collections.TrafficDistributionPreferSameZone
			case strings.ToLower(corev1.ServiceTrafficDistributionPreferSameNode):
				return collections.TrafficDistributionPreferSameNode
			default:
				return collections.TrafficDistributionAny
			}
		}
	}
	return collections.TrafficDistributionAny
}

// ClusterPorts are the ports of a service that get a cluster: every non-UDP port, except on
// ExternalName services, which get none.
func ClusterPorts(svc *collections.ServiceInfo) []collections.ServicePort {
	if svc.Resolution == collections.Alias {
		return nil
	}
	var out []collections.ServicePort
	for _, p := range svc.Ports {
		if p.HasCluster() {
			out = append(out, p)
		}
	}
	return out
}
