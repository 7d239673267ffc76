package kubeaccess

import (
	"context"
	"errors"
	"fmt"
	"strings"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Errors, by class.
var (
	// ErrForbidden: the API server denies at least one permission the gateway needs (fix the Role).
	ErrForbidden = errors.New("kubernetes RBAC denies the gateway's service account")
	// ErrUnchecked: the API server could not be asked (unreachable, or the review itself refused).
	ErrUnchecked = errors.New("kubernetes permissions could not be checked")
)

// Permission is one verb on one resource, in one namespace ("" = every namespace, a ClusterRole's).
type Permission struct {
	Group, Resource, Verb, Namespace string
}

func (p Permission) String() string {
	group := p.Group
	if group == "" {
		group = `"" (core)`
	}
	where := "in every namespace (ClusterRole)"
	if p.Namespace != "" {
		where = fmt.Sprintf("in namespace %q", p.Namespace)
	}
	return fmt.Sprintf("verb %q on resource %q of apiGroup %s %s", p.Verb, p.Resource, group, where)
}

// Verbs is one Permission per verb on the same resource.
func Verbs(group, resource, namespace string, verbs ...string) []Permission {
	ps := make([]Permission, 0, len(verbs))
	for _, v := range verbs {
		ps = append(ps, Permission{Group: group, Resource: resource, Verb: v, Namespace: namespace})
	}
	return ps
}

// Check asks the API server about every permission and returns nil only when all are allowed; what is
// used for is the feature that needs them ("service discovery"), for the message.
func Check(ctx context.Context, c kubernetes.Interface, usedFor string, perms []Permission) error {
	var denied []string
	for _, p := range perms {
		r, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: p.Namespace, Verb: p.Verb, Group: p.Group, Resource: p.Resource,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("%w: %s: asking for %s: %w", ErrUnchecked, usedFor, p, err)
		}
		if !r.Status.Allowed {
			denied = append(denied, p.String())
		}
	}
	if len(denied) > 0 {
		return fmt.Errorf("%w: %s needs %s; grant it in the Role bound to the service account (the Helm chart's rbac templates do)",
			ErrForbidden, usedFor, strings.Join(denied, ", "))
	}
	return nil
}
