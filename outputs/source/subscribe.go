package source

import (
	"istio.io/istio/pkg/kube/krt"

	"github.com/krteds/krteds/collections"
	"github.com/krteds/krteds/transforms"
	"github.com/krteds/krteds/transforms/cds"
	"github.com/krteds/krteds/transforms/eds"
)

// Subscribe calls f with the names whose resources changed, and with the connections whose view
// changed. Calls for one collection come in order. With LEDS, a change of a CLA set is also a
// change of the collections whose members differ between its old and new CLAs.
func (s *Source) Subscribe(f func(collections.Change)) {
	if s.g.LEDSCollections != nil {
		s.g.CLAs.RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
			var globs []string
			seen := map[string]struct{}{}
			for _, e := range evs {
				eds.ChangedLEDSCollections(e.Old, e.New, func(name string) {
					if _, dup := seen[name]; !dup {
						seen[name] = struct{}{}
						globs = append(globs, name)
					}
				})
			}
			if len(globs) > 0 {
				f(collections.Change{TypeURL: eds.TypeLbEndpoint, Names: globs, At: s.g.Inputs.Clock.Last()})
			}
		}, false)
	}
	for _, typeURL := range []string{transforms.TypeCluster, transforms.TypeCLA, transforms.TypeListener, transforms.TypeRoute} {
		s.resourcesOf(typeURL).RegisterBatch(func(evs []krt.Event[collections.ResourceSet]) {
			at := s.g.Inputs.Clock.Last()
			names := make([]string, 0, len(evs))
			var causes []collections.Cause
			if typeURL == transforms.TypeCLA {
				causes = make([]collections.Cause, 0, len(evs))
			}
			for _, e := range evs {
				latest := e.Latest()
				names = append(names, latest.Name)
				if causes != nil {
					var c collections.Cause
					if e.New != nil {
						c = e.New.Cause()
					}
					causes = append(causes, c)
				}
				if typeURL == transforms.TypeListener {
					// The short names resolving to it (in any namespace: a stream of another
					// namespace holding the same short name is looked at again for nothing).
					names = append(names, cds.ListenerAliases(&latest)...)
				}
			}
			f(collections.Change{TypeURL: typeURL, Names: names, Causes: causes, At: at})
		}, false)
	}
	s.g.Proxies.RegisterBatch(func(evs []krt.Event[collections.Proxy]) {
		at := s.g.Inputs.Clock.Last()
		conns := make([]string, 0, len(evs))
		for _, e := range evs {
			if e.New != nil {
				conns = append(conns, e.New.ConnID)
			}
		}
		if len(conns) > 0 {
			f(collections.Change{Conns: conns, At: at})
		}
	}, false)
}
