package kubeaccess

import (
	"context"
	"errors"
	"strings"
	"testing"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// allowing answers reviews like an RBAC authorizer holding exactly the allowed verbs (resource/verb).
func allowing(allowed ...string) *fake.Clientset {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview)
		ra := r.Spec.ResourceAttributes
		for _, s := range allowed {
			if s == ra.Resource+"/"+ra.Verb {
				r.Status.Allowed = true
			}
		}
		return true, r, nil
	})
	return c
}

func TestCheck(t *testing.T) {
	perms := append(Verbs("", "pods", "inference", "list", "watch"),
		Verbs("coordination.k8s.io", "leases", "", "update")...)
	for _, tc := range []struct {
		name    string
		allowed []string
		want    error
		names   []string // must all appear in the message
		absent  []string
	}{
		{name: "all granted", allowed: []string{"pods/list", "pods/watch", "leases/update"}},
		{name: "watch missing", allowed: []string{"pods/list", "leases/update"}, want: ErrForbidden,
			names: []string{`verb "watch" on resource "pods"`, `namespace "inference"`, "service discovery"}, absent: []string{`"list"`}},
		{name: "two missing", allowed: []string{"pods/watch"}, want: ErrForbidden,
			names: []string{`verb "list" on resource "pods"`, `verb "update" on resource "leases" of apiGroup coordination.k8s.io in every namespace`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(context.Background(), allowing(tc.allowed...), "service discovery", perms)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
			for _, s := range tc.names {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("message %q lacks %q", err, s)
				}
			}
			for _, s := range tc.absent {
				if strings.Contains(err.Error(), s) {
					t.Errorf("message %q names granted %s", err, s)
				}
			}
		})
	}
}

func TestCheckUnreachable(t *testing.T) {
	c := fake.NewClientset()
	c.PrependReactor("create", "selfsubjectaccessreviews", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	err := Check(context.Background(), c, "cluster admission", Verbs("", "pods", "", "list"))
	if !errors.Is(err, ErrUnchecked) || errors.Is(err, ErrForbidden) {
		t.Fatalf("err = %v, want ErrUnchecked", err)
	}
}
