package apierror

import (
	"net/http"
	"strings"
)

// probeMethods are the methods a route may be served for; a 405's Allow header lists those of them the
// path has.
var probeMethods = [...]string{http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// AllowedMethods lists the methods mux serves r's path for with a pattern other than fallback (its
// catch-all, "/"): empty when the path has no route at all. It only looks patterns up.
func AllowedMethods(mux *http.ServeMux, r *http.Request, fallback string) []string {
	var allow []string
	for _, m := range probeMethods {
		probe := &http.Request{Method: m, URL: r.URL, Host: r.Host, Header: http.Header{}}
		if _, pattern := mux.Handler(probe); pattern != "" && pattern != fallback {
			allow = append(allow, m)
		}
	}
	return allow
}

// MethodNotAllowed is the 405 for method on path, whose Allow header lists allow.
func MethodNotAllowed(method, path string, allow []string) *Error {
	e := New(http.StatusMethodNotAllowed, CodeMethodNotAllowed,
		"method "+method+" is not allowed on "+path+"; allowed: "+strings.Join(allow, ", "), nil)
	e.Allow = allow
	return e
}

// NoRoute answers r from mux's catch-all: a 405 naming the allowed methods when the path has routes
// for other methods, else a 404.
func NoRoute(w http.ResponseWriter, r *http.Request, mux *http.ServeMux, fallback string) {
	if allow := AllowedMethods(mux, r, fallback); len(allow) > 0 {
		MethodNotAllowed(r.Method, r.URL.Path, allow).WriteHTTP(w)
		return
	}
	New(http.StatusNotFound, CodeNotFound, "no route for "+r.Method+" "+r.URL.Path, nil).WriteHTTP(w)
}
