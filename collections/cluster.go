package collections

import "sync"

// Cluster is a remote Kubernetes cluster whose endpoints join the mesh: its ID and its input
// collections. A source adds it once its inputs have synced and removes it (closing Stop) when it
// leaves, so a cluster that never syncs never holds the graph back.
type Cluster struct {
	ID string `json:"id"`
	// Source says where its objects come from (a kubeconfig, a folder), for logs and /debug.
	Source string `json:"source"`
	Inputs Inputs `json:"-"`
	// Stop is closed when the cluster leaves: the collections derived for it stop with it.
	Stop <-chan struct{} `json:"-"`

	once    sync.Once
	derived any
}

// ResourceName is the cluster ID.
func (c *Cluster) ResourceName() string { return c.ID }

// Equals is identity: a cluster whose inputs change is a new Cluster.
func (c *Cluster) Equals(o *Cluster) bool { return c == o }

// Derived returns what build makes for the cluster, made once: the graph derives a cluster's
// collections the first time it sees the cluster and reuses them after.
func (c *Cluster) Derived(build func() any) any {
	c.once.Do(func() { c.derived = build() })
	return c.derived
}
