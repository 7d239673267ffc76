// Package kubeaccess checks, once at startup, that the gateway's Kubernetes credentials grant every
// permission it is about to use.
//
// Without it a Role missing one verb only shows up as a client-go reflector or leader elector retrying a
// forbidden call forever, with the gateway up but blind (a missing watch even passes the first list). Each
// [Permission] is asked of the API server with a SelfSubjectAccessReview, which every authenticated
// identity may create (the built-in system:basic-user role), so the check needs no extra RBAC; all denied
// permissions are named in one [ErrForbidden] error, with verb, resource, group and namespace, as a Role
// would spell them.
package kubeaccess
