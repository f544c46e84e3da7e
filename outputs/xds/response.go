package xds

import (
	"context"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
)

// sotwResponse is a state-of-the-world response built from pre-marshalled resources.
type sotwResponse struct {
	req      *discovery.DiscoveryRequest
	resp     *discovery.DiscoveryResponse
	returned map[string]string
	ctx      context.Context
}

var _ cache.Response = &sotwResponse{}

func (r *sotwResponse) GetDiscoveryResponse() (*discovery.DiscoveryResponse, error) {
	return r.resp, nil
}
func (r *sotwResponse) GetRequest() *discovery.DiscoveryRequest { return r.req }
func (r *sotwResponse) GetVersion() (string, error)             { return r.resp.VersionInfo, nil }
func (r *sotwResponse) GetResponseVersion() string              { return r.resp.VersionInfo }
func (r *sotwResponse) GetReturnedResources() map[string]string { return r.returned }
func (r *sotwResponse) GetContext() context.Context             { return r.ctx }

// deltaResponse is an incremental response built from pre-marshalled resources.
type deltaResponse struct {
	req      *discovery.DeltaDiscoveryRequest
	resp     *discovery.DeltaDiscoveryResponse
	returned map[string]string
	ctx      context.Context
}

var _ cache.DeltaResponse = &deltaResponse{}

func (r *deltaResponse) GetDeltaDiscoveryResponse() (*discovery.DeltaDiscoveryResponse, error) {
	return r.resp, nil
}
func (r *deltaResponse) GetDeltaRequest() *discovery.DeltaDiscoveryRequest { return r.req }
func (r *deltaResponse) GetSystemVersion() (string, error)                 { return r.resp.SystemVersionInfo, nil }
func (r *deltaResponse) GetResponseVersion() string                        { return r.resp.SystemVersionInfo }
func (r *deltaResponse) GetNextVersionMap() map[string]string              { return r.returned }
func (r *deltaResponse) GetReturnedResources() map[string]string           { return r.returned }
func (r *deltaResponse) GetContext() context.Context                       { return r.ctx }
