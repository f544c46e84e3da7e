package collections

import (
	"slices"
	"strings"
	"testing"
)

// TestClusterLocalHosts holds NewClusterLocalHosts to istiod's clusterLocalProvider.onMeshUpdated
// and ClusterLocalHosts.IsClusterLocal (MostSpecificHostMatch): the defaults (kube-system,
// kubernetes.default and the discovery address's host, the domain added unless it ends in it),
// serviceSettings setting hosts true or false, a false host removing the defaults it names or
// falls under, the most specific entry winning.
func TestClusterLocalHosts(t *testing.T) {
	const discovery = "istiod.istio-system.svc:15012"
	local := func(hosts ...string) ServiceSetting { return ServiceSetting{Hosts: hosts, ClusterLocal: true} }
	global := func(hosts ...string) ServiceSetting { return ServiceSetting{Hosts: hosts} }
	cases := []struct {
		name      string
		domain    string
		discovery string
		settings  []ServiceSetting
		local     []string
		notLocal  []string
		err       string
	}{{
		name:     "the defaults: kube-system, the API server, the discovery address's host",
		local:    []string{"kube-dns.kube-system.svc.cluster.local", "kubernetes.default.svc.cluster.local", "istiod.istio-system.svc.cluster.local"},
		notLocal: []string{"foo.ns1.svc.cluster.local", "istiod-canary.istio-system.svc.cluster.local", "kubernetes.default.svc", "api.example.com", "kube-system.svc.cluster.local"},
	}, {
		name:      "another discovery address: its host, the domain added",
		discovery: "istiod-canary.istio-control.svc:15012",
		local:     []string{"istiod-canary.istio-control.svc.cluster.local"},
		notLocal:  []string{"istiod.istio-system.svc.cluster.local"},
	}, {
		name:      "a discovery address already in the domain is taken as it is",
		discovery: "istiod.istio-system.svc.cluster.local:15012",
		local:     []string{"istiod.istio-system.svc.cluster.local"},
		notLocal:  []string{"istiod.istio-system.svc.cluster.local.cluster.local"},
	}, {
		name:      "a discovery address outside the cluster gets the domain appended, as istiod does",
		discovery: "istiod.example.com:15012",
		local:     []string{"istiod.example.com.cluster.local"},
		notLocal:  []string{"istiod.example.com"},
	}, {
		name:      "a discovery address without a port gives no host, and an error; the rest stays",
		discovery: "istiod.istio-system.svc",
		local:     []string{"kubernetes.default.svc.cluster.local"},
		notLocal:  []string{"istiod.istio-system.svc.cluster.local"},
		err:       "discovery address",
	}, {
		name:      "a port that is not a number gives no host",
		discovery: "istiod.istio-system.svc:grpc",
		notLocal:  []string{"istiod.istio-system.svc.cluster.local"},
		err:       "not a number",
	}, {
		name:     "another domain",
		domain:   "corp.example",
		local:    []string{"kube-dns.kube-system.svc.corp.example", "kubernetes.default.svc.corp.example", "istiod.istio-system.svc.corp.example"},
		notLocal: []string{"kubernetes.default.svc.cluster.local"},
	}, {
		name:     "the kube-system default removed",
		settings: []ServiceSetting{global("*.kube-system.svc.cluster.local")},
		local:    []string{"kubernetes.default.svc.cluster.local"},
		notLocal: []string{"kube-dns.kube-system.svc.cluster.local"},
	}, {
		name:     "one kube-system host set global removes the wildcard default, as istiod's suffix rule does",
		settings: []ServiceSetting{global("kube-dns.kube-system.svc.cluster.local")},
		notLocal: []string{"kube-dns.kube-system.svc.cluster.local", "metrics.kube-system.svc.cluster.local"},
	}, {
		name:     "the API server and the discovery host set global",
		settings: []ServiceSetting{global("kubernetes.default.svc.cluster.local", "istiod.istio-system.svc.cluster.local")},
		local:    []string{"kube-dns.kube-system.svc.cluster.local"},
		notLocal: []string{"kubernetes.default.svc.cluster.local", "istiod.istio-system.svc.cluster.local"},
	}, {
		name:     "hosts made local: exact and wildcard",
		settings: []ServiceSetting{local("foo.ns1.svc.cluster.local", "*.ns2.svc.cluster.local")},
		local:    []string{"foo.ns1.svc.cluster.local", "bar.ns2.svc.cluster.local", "kubernetes.default.svc.cluster.local"},
		notLocal: []string{"bar.ns1.svc.cluster.local"},
	}, {
		name:     "everything local but one namespace: the most specific wildcard wins",
		settings: []ServiceSetting{local("*"), global("*.ns1.svc.cluster.local")},
		local:    []string{"foo.ns2.svc.cluster.local", "api.example.com", "kube-dns.kube-system.svc.cluster.local"},
		notLocal: []string{"foo.ns1.svc.cluster.local"},
	}, {
		name:     "everything local but one host: an exact entry beats every wildcard",
		settings: []ServiceSetting{local("*.cluster.local"), global("foo.ns1.svc.cluster.local")},
		local:    []string{"bar.ns1.svc.cluster.local"},
		notLocal: []string{"foo.ns1.svc.cluster.local", "api.example.com"},
	}, {
		name:     "a global wildcard wider than the defaults leaves them",
		settings: []ServiceSetting{global("*.svc.cluster.local")},
		// istiod removes a default the setting's host equals or falls under; here the defaults
		// fall under the setting instead, so they stay, and being more specific, they win.
		local:    []string{"kube-dns.kube-system.svc.cluster.local", "kubernetes.default.svc.cluster.local"},
		notLocal: []string{"foo.ns1.svc.cluster.local"},
	}, {
		name:     "a later setting of a host overrides an earlier one",
		settings: []ServiceSetting{local("foo.ns1.svc.cluster.local"), global("foo.ns1.svc.cluster.local")},
		notLocal: []string{"foo.ns1.svc.cluster.local"},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			domain, addr := tc.domain, tc.discovery
			if domain == "" {
				domain = DefaultDomain
			}
			if addr == "" {
				addr = discovery
			}
			c, err := NewClusterLocalHosts(domain, addr, tc.settings)
			if (err == nil) != (tc.err == "") || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("error %v, want one saying %q", err, tc.err)
			}
			for _, h := range tc.local {
				if !c.IsClusterLocal(h) {
					t.Errorf("%s is not cluster-local", h)
				}
			}
			for _, h := range tc.notLocal {
				if c.IsClusterLocal(h) {
					t.Errorf("%s is cluster-local", h)
				}
			}
		})
	}
}

// TestConfigClusterLocal: a Config's cluster-local hosts are istiod's defaults with the
// discovery address of a default install in the system namespace, changed by the mesh config's
// serviceSettings and then by the hosts --cluster-local-host adds; WithDefaults builds them once.
func TestConfigClusterLocal(t *testing.T) {
	cfg := Config{SystemNamespace: "istio-control"}.WithDefaults()
	if cfg.DiscoveryAddress != "istiod.istio-control.svc:15012" {
		t.Fatalf("default discovery address %q", cfg.DiscoveryAddress)
	}
	for h, want := range map[string]bool{
		"istiod.istio-control.svc.cluster.local": true, "istiod.istio-system.svc.cluster.local": false,
		"kubernetes.default.svc.cluster.local": true, "kube-dns.kube-system.svc.cluster.local": true,
	} {
		if got := cfg.IsClusterLocal(h); got != want {
			t.Errorf("%s: cluster-local %v, want %v", h, got, want)
		}
	}
	cfg = Config{
		DiscoveryAddress:  "istiod.istio-system.svc:15012",
		ServiceSettings:   []ServiceSetting{{Hosts: []string{"*.ns1.svc.cluster.local"}, ClusterLocal: true}, {Hosts: []string{"kubernetes.default.svc.cluster.local"}}},
		ClusterLocalHosts: []string{"foo.ns2.svc.cluster.local"},
	}
	for _, c := range []Config{cfg, cfg.WithDefaults()} {
		for h, want := range map[string]bool{
			"a.ns1.svc.cluster.local": true, "foo.ns2.svc.cluster.local": true, "bar.ns2.svc.cluster.local": false,
			"kubernetes.default.svc.cluster.local": false, "istiod.istio-system.svc.cluster.local": true,
		} {
			if got := c.IsClusterLocal(h); got != want {
				t.Errorf("%s: cluster-local %v, want %v", h, got, want)
			}
		}
	}
	cl, err := cfg.ClusterLocal()
	if err != nil {
		t.Fatal(err)
	}
	want := []ServiceSetting{
		{Hosts: []string{"*.kube-system.svc.cluster.local", "*.ns1.svc.cluster.local", "foo.ns2.svc.cluster.local", "istiod.istio-system.svc.cluster.local"}, ClusterLocal: true},
		{Hosts: []string{"kubernetes.default.svc.cluster.local"}},
	}
	if got := cl.Hosts(); !slices.EqualFunc(got, want, func(a, b ServiceSetting) bool {
		return a.ClusterLocal == b.ClusterLocal && slices.Equal(a.Hosts, b.Hosts)
	}) {
		t.Errorf("hosts %v, want %v", got, want)
	}
}
