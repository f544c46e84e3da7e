package source

import (
	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms/policy"
)

// A hostname ServiceEntries of several namespaces define has a service, and resource sets, per
// namespace (policy.SetKey); which of them a proxy is sent depends on its view
// (policy.PickHostNamespace), decided when it asks, as every other name is.

// hostOwner is the namespace whose service of the hostname of name a proxy of view v is sent,
// when ServiceEntries of several namespaces define it ("" otherwise, or when it sees none).
func (s *Source) hostOwner(v *collections.View, typeURL, name string) string {
	return policy.PickHostNamespace(s.g.SharedHost(policy.HostOfName(typeURL, name)), v)
}

// servesView reports whether a set of a shared host's service (its key names the namespace) is
// the one a proxy of view v resolves its name to; every other set is. picks remembers the picks
// of one listing by hostname.
func (s *Source) servesView(set *collections.ResourceSet, v *collections.View, picks map[string]string) bool {
	owner, _ := policy.SplitSetKey(set.Key)
	if owner == "" {
		return true
	}
	host := policy.HostOfName(set.TypeURL, set.Name)
	pick, ok := picks[host]
	if !ok {
		pick = policy.PickHostNamespace(s.g.SharedHost(host), v)
		picks[host] = pick
	}
	return pick == owner
}
