package eds

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/cespare/xxhash/v2"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpoint "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
)

// LEDS: a ClusterLoadAssignment over the threshold (Config.LEDSThreshold) also gets a form in
// which each LocalityLbEndpoints names a glob collection (leds_cluster_locality_config, over
// ADS) instead of listing its endpoints, and each endpoint is a resource of type
// envoy.config.endpoint.v3.LbEndpoint named in its collection. A client of that form subscribes
// to the collections (delta ADS only: glob collections exist only there); a one-endpoint change
// then sends that endpoint's resource, or its removal, instead of the whole CLA.

// TypeLbEndpoint is the type URL of LEDS resources.
const TypeLbEndpoint = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint"

// ledsPrefix starts every LEDS collection and resource name krteds makes.
const ledsPrefix = "xdstp://krteds/envoy.config.endpoint.v3.LbEndpoint/"

// IsLEDSCollection reports whether name is a glob collection of krteds' LEDS resources.
func IsLEDSCollection(name string) bool {
	return strings.HasPrefix(name, ledsPrefix) && strings.HasSuffix(name, "/*")
}

// unsafeInID are the characters an xdstp name's id must not hold as they are: Envoy
// percent-encodes them when it matches a resource to its collection, and "*" and "/" are the
// glob and the path separator.
const unsafeInID = "%:?#[]*/~"

// ledsSegment is s if it can stand in an xdstp path as it is, else a hash of it.
func ledsSegment(s string) string {
	if s != "" && !strings.ContainsAny(s, unsafeInID) {
		return s
	}
	return "h" + strconv.FormatUint(xxhash.Sum64String(s), 16)
}

// ledsCollectionPrefix is the name of a locality group's collection without its final "*":
// xdstp://krteds/envoy.config.endpoint.v3.LbEndpoint/<cluster>/<form>/<locality>/, where form is
// a hash of the CLA's key (classes with different CLAs of one cluster have different
// collections) and locality is region~zone~subzone~p<priority>.
func ledsCollectionPrefix(claKey, cluster string, g CLAGroup) string {
	loc := g.Locality.Region + "~" + g.Locality.Zone + "~" + g.Locality.Subzone
	if strings.ContainsAny(g.Locality.Region+g.Locality.Zone+g.Locality.Subzone, unsafeInID) {
		loc = ledsSegment(loc)
	}
	form := strconv.FormatUint(xxhash.Sum64String(claKey)>>32, 16)
	return ledsPrefix + ledsSegment(cluster) + "/c" + form + "/" + loc + "~p" + strconv.FormatUint(uint64(g.Priority), 10) + "/"
}

// ledsMemberID names an endpoint in its collection: its address and port, an IPv6 address's
// colons as dashes.
func ledsMemberID(e collections.Endpoint) string {
	return ledsSegment(strings.ReplaceAll(e.Address, ":", "-") + "_" + strconv.FormatUint(uint64(e.Port), 10))
}

// EncodeLEDS renders a plan in its LEDS form: the ClusterLoadAssignment naming one collection per
// locality group (with the group's locality, weight and priority, as the plain form has them)
// and each group's endpoints as LbEndpoint resources, encoded as in the plain form. claKey
// distinguishes the CLAs of one cluster for different classes.
func (p CLAPlan) EncodeLEDS(claKey string) (*collections.LEDSForm, error) {
	cla := &endpoint.ClusterLoadAssignment{ClusterName: p.ClusterName}
	form := &collections.LEDSForm{Collections: make([]collections.LEDSCollection, 0, len(p.Groups))}
	enc := encoder{tls: p.TLS}
	for _, g := range p.Groups {
		prefix := ledsCollectionPrefix(claKey, p.ClusterName, g)
		col := collections.LEDSCollection{Name: prefix + "*", Members: make([]*collections.Resource, 0, len(g.Endpoints))}
		seen := make(map[string]int, len(g.Endpoints))
		for _, e := range g.Endpoints {
			id := ledsMemberID(*e)
			// The same address and port twice in a group (two slices listing one endpoint)
			// stay two resources, as they are two entries of the plain form.
			if n := seen[id]; n > 0 {
				seen[id] = n + 1
				id += "~" + strconv.Itoa(n+1)
			} else {
				seen[id] = 1
			}
			body := enc.lbEndpoint(make([]byte, 0, enc.lbEndpointSize(e)), e)
			col.Members = append(col.Members, transforms.Versioned(prefix+id, TypeLbEndpoint, body))
		}
		col.Version = collectionVersion(col.Members)
		form.Collections = append(form.Collections, col)
		loc := &endpoint.LocalityLbEndpoints{
			Locality:            &core.Locality{Region: g.Locality.Region, Zone: g.Locality.Zone, SubZone: g.Locality.Subzone},
			LoadBalancingWeight: wrapperspb.UInt32(uint32(g.weight())),
			Priority:            g.Priority,
			LbConfig: &endpoint.LocalityLbEndpoints_LedsClusterLocalityConfig{LedsClusterLocalityConfig: &endpoint.LedsClusterLocalityConfig{
				LedsConfig:         transforms.ADSConfigSource(),
				LedsCollectionName: col.Name,
			}},
		}
		cla.Endpoints = append(cla.Endpoints, loc)
	}
	r, err := transforms.Marshal(p.ClusterName, transforms.TypeCLA, cla)
	if err != nil {
		return nil, fmt.Errorf("marshalling the LEDS form of ClusterLoadAssignment %s: %w", p.ClusterName, err)
	}
	form.CLA = r
	return form, nil
}

// collectionVersion hashes the members' names and versions.
func collectionVersion(members []*collections.Resource) uint64 {
	h := xxhash.New()
	var b [8]byte
	for _, m := range members {
		_, _ = h.WriteString(m.Name)
		binary.LittleEndian.PutUint64(b[:], m.Version)
		_, _ = h.Write(b[:])
	}
	return h.Sum64()
}

// ChangedLEDSCollections lists the collections whose members differ between two versions of a
// CLA set (either may be nil): those of one and not the other, and those whose version changed;
// and every collection of a class new to the set, even one another class had already: a proxy
// whose class changed waits for its class's CLA, and is told its collections this way.
func ChangedLEDSCollections(old, cur *collections.ResourceSet, add func(name string)) {
	versions := map[string]uint64{}
	each := func(s *collections.ResourceSet, f func(class string, c *collections.LEDSCollection)) {
		if s == nil {
			return
		}
		visit := func(class string, r *collections.Resource) {
			if r == nil || r.LEDS == nil {
				return
			}
			for i := range r.LEDS.Collections {
				f(class, &r.LEDS.Collections[i])
			}
		}
		visit("", s.Shared)
		for k, r := range s.ByClass {
			visit(k, r)
		}
	}
	each(old, func(_ string, c *collections.LEDSCollection) { versions[c.Name] = c.Version })
	isNew := func(class string) bool {
		switch {
		case old == nil:
			return true
		case class == "":
			return old.Shared == nil
		}
		return old.ByClass[class] == nil
	}
	present, added := map[string]bool{}, map[string]bool{}
	each(cur, func(class string, c *collections.LEDSCollection) {
		present[c.Name] = true
		if added[c.Name] {
			return // a CLA several classes share
		}
		if v, ok := versions[c.Name]; !ok || v != c.Version || isNew(class) {
			added[c.Name] = true
			add(c.Name)
		}
	})
	for name := range versions {
		if !present[name] {
			add(name)
		}
	}
}

// LEDSCollectionsOf lists the LEDS collections of a CLA set's resources (the index by which a
// collection finds its CLA).
func LEDSCollectionsOf(s collections.ResourceSet) []string {
	var out []string
	add := func(r *collections.Resource) {
		if r == nil || r.LEDS == nil {
			return
		}
		for _, c := range r.LEDS.Collections {
			if !slices.Contains(out, c.Name) {
				out = append(out, c.Name)
			}
		}
	}
	add(s.Shared)
	for _, r := range s.ByClass {
		add(r)
	}
	return out
}
