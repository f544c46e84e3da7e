package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/krteds/krteds/outputs/xds/adsclient"
)

// TestExplainProxyForms: `krteds explain --proxy` names a connected proxy in every form the
// debug pages take (xds.Server.FindProxy, after istiod's getProxyConnection): its connection
// id, node id, <pod>.<namespace>, or a part of that naming one proxy; a part naming two is
// refused with both names, an unknown one with a 404.
func TestExplainProxyForms(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	bin := buildBinary(t)
	_, xdsAddr, debugAddr, _, _ := serveExample(t, bin)
	waitFor(t, "/ready", answers(debugAddr, http.StatusOK))
	cc, err := adsclient.Dial(xdsAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	const (
		reviews = "outbound|9080||reviews.shop.svc.cluster.local"
		nodeA   = "sidecar~10.10.0.11~frontend-7d9f8-aaaaa.shop~shop.svc.cluster.local"
		nodeB   = "sidecar~10.10.0.12~frontend-7d9f8-bbbbb.shop~shop.svc.cluster.local"
	)
	for _, id := range []string{nodeA, nodeB} {
		s, err := adsclient.Open(context.Background(), cc, adsclient.Node{ID: id, Namespace: "shop"})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if err := s.Request(adsclient.TypeCLA, reviews); err != nil {
			t.Fatal(err)
		}
		if _, err := s.Recv(10 * time.Second); err != nil {
			t.Fatalf("%s: %v", id, err)
		}
	}
	var adsz struct {
		Clients []struct {
			ConnectionID string `json:"connectionId"`
			Address      string `json:"address"`
		} `json:"clients"`
	}
	resp, err := http.Get("http://" + debugAddr + "/debug/adsz")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&adsz)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	connA := ""
	for _, c := range adsz.Clients {
		if c.Address == "10.10.0.11" {
			connA = c.ConnectionID
		}
	}
	if connA == "" {
		t.Fatalf("/debug/adsz does not list the proxy: %+v", adsz)
	}
	explain := func(proxy string) (string, error) {
		return run(t, bin, "explain", "--debug", debugAddr, "--proxy", proxy, "--cluster", reviews, "--endpoint", "10.10.1.13")
	}
	for _, form := range []string{connA, nodeA, "frontend-7d9f8-aaaaa.shop", "frontend-7d9f8-aaaaa", "aaaaa"} {
		out, err := explain(form)
		if err != nil || !strings.Contains(out, "proxy "+nodeA+":") || !strings.Contains(out, "10.10.1.13: sent, UNHEALTHY") {
			t.Errorf("krteds explain --proxy %s: %v\n%s", form, err, out)
		}
	}
	for form, want := range map[string][]string{
		"frontend-7d9f8": {"409 Conflict", "frontend-7d9f8-aaaaa.shop, frontend-7d9f8-bbbbb.shop"},
		"nobody.shop":    {"404 Not Found", `no connected proxy "nobody.shop"`},
	} {
		out, err := explain(form)
		if err == nil {
			t.Errorf("krteds explain --proxy %s succeeded:\n%s", form, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("krteds explain --proxy %s: %q lacks %q", form, out, w)
			}
		}
	}
}
