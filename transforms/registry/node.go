package registry

import (
	"istio.io/istio/pkg/kube/krt"
	corev1 "k8s.io/api/core/v1"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// NodeLocalities reads a Node's locality from its topology labels: region and zone from
// topology.kubernetes.io/{region,zone}, falling back to the beta failure-domain labels, and the
// subzone from topology.istio.io/subzone.
// The default network is read once per node, for the pods on it.
func NodeLocalities(systemNetwork krt.Singleton[string]) transforms.Single[*corev1.Node, *collections.NodeLocality] {
	return transforms.Single[*corev1.Node, *collections.NodeLocality]{Reads: []any{systemNetwork}, Fn: func(ctx krt.HandlerContext, n *corev1.Node) **collections.NodeLocality {
		l := NodeLocality(n.Labels)
		out := &collections.NodeLocality{Name: n.Name, Locality: l, LocalityLabel: l.String(), Network: FetchSystemNetwork(ctx, systemNetwork)}
		return &out
	}}
}

// NodeLocality reads the locality from a Node's labels.
func NodeLocality(labels map[string]string) collections.Locality {
	l := collections.Locality{
		Region:  labels[collections.LabelTopologyRegion],
		Zone:    labels[collections.LabelTopologyZone],
		Subzone: labels[collections.LabelTopologySubzone],
	}
	if l.Region == "" {
		l.Region = labels[collections.LabelBetaRegion]
	}
	if l.Zone == "" {
		l.Zone = labels[collections.LabelBetaZone]
	}
	return l
}
