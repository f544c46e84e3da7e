package admission

import (
	"context"
	"testing"

	authnv1 "k8s.io/api/authentication/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// TestTokenReviewChecksAudiences: an authenticated token is accepted only when the TokenReview
// says it is meant for one of krteds' audiences; an authenticator that ignores audiences answers
// none, and the token is refused.
func TestTokenReviewChecksAudiences(t *testing.T) {
	for _, tc := range []struct {
		answered []string
		ok       bool
	}{
		{[]string{"istio-ca"}, true},
		{nil, false},
		{[]string{"something-else"}, false},
	} {
		c := fake.NewClientset()
		c.PrependReactor("create", "tokenreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
			return true, &authnv1.TokenReview{Status: authnv1.TokenReviewStatus{Authenticated: true, Audiences: tc.answered,
				User: authnv1.UserInfo{Username: "system:serviceaccount:ns1:sa1"}}}, nil
		})
		id, err := KubeTokenReview{Client: c, Audiences: []string{"istio-ca"}, TrustDomain: "cluster.local"}.Authenticate(context.Background(), "t")
		if (err == nil) != tc.ok {
			t.Errorf("audiences %v: %v", tc.answered, err)
		}
		if tc.ok && (id.Namespace != "ns1" || id.ServiceAccount != "sa1") {
			t.Errorf("identity %+v", id)
		}
	}
}
