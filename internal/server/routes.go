package server

import (
	"context"
	"io"
	"net/http"

	"github.com/sluicegw/sluice/internal/apierror"
)

// Route is one more REST route (the Rust gateway's /workers, /get_loads, ...): Guard authenticates
// it (nil = open); Admin routes go with the admin API (its listener, security headers and body
// limit).
type Route struct {
	// Pattern is an http.ServeMux pattern ("GET /get_loads", "/workers/{id}").
	Pattern string
	Handler http.Handler
	Guard   func(r *http.Request) (context.Context, error)
	Admin   bool
}

func mountRoutes(main, admin *http.ServeMux, adminRoute func(http.Handler) http.Handler, routes []Route) {
	for _, rt := range routes {
		h := guard(rt.Handler, rt.Guard)
		if rt.Admin {
			admin.Handle(rt.Pattern, adminRoute(h))
			continue
		}
		main.Handle(rt.Pattern, h)
	}
}

// liveness answers as the Rust gateway's /liveness: 200 "OK" while the process serves.
func liveness(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = io.WriteString(w, "OK")
}

// probeHandler serves only the probes, for --health-check-port: no middleware, no auth, nothing a
// saturated main port could hold up.
func probeHandler(ready func() error, warnings []string) http.Handler {
	mux := http.NewServeMux()
	mountProbes(mux, ready, warnings)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { apierror.NoRoute(w, r, mux, "/") })
	return mux
}

// metricsHandler serves only /metrics, for --prometheus-port; nil without metrics.
func metricsHandler(m http.Handler) http.Handler {
	if m == nil {
		return nil
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m)
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { apierror.NoRoute(w, r, mux, "/") })
	return mux
}
