package server

import (
	"net/http"
	"strings"
)

// adminAllowed lists the methods the admin REST API serves path for: grpc-gateway says only that a
// path has other methods, and a 405 must name them (Allow). The table is the rules of
// proto/sluice/admin/v1/admin_http.yaml; TestAdminAllowedMatchesHTTPRules keeps it in step.
func adminAllowed(path string) []string {
	const prefix = "/admin/v1/"
	rest, ok := strings.CutPrefix(path, prefix)
	if !ok {
		return nil
	}
	switch rest {
	case "workers":
		return []string{http.MethodGet, http.MethodPost}
	case "admission":
		return []string{http.MethodGet, http.MethodPatch}
	case "loads", "capacity":
		return []string{http.MethodGet}
	case "tenants/budgets":
		return []string{http.MethodGet, http.MethodPut}
	case "cache:flush":
		return []string{http.MethodPost}
	case "model_aliases":
		return []string{http.MethodGet}
	}
	if alias, ok := strings.CutPrefix(rest, "model_aliases/"); ok {
		if alias == "" || strings.Contains(alias, "/") {
			return nil
		}
		return []string{http.MethodDelete, http.MethodPut}
	}
	id, ok := strings.CutPrefix(rest, "workers/")
	if !ok || id == "" || strings.Contains(id, "/") {
		return nil
	}
	if strings.HasSuffix(id, ":drain") {
		return []string{http.MethodPost}
	}
	return []string{http.MethodGet, http.MethodPatch, http.MethodDelete}
}
