package server

import (
	"net/http"
	"strings"

	"github.com/sluicegw/sluice/internal/apierror"
)

// cors answers CORS preflights and marks responses for allowed browser origins, so pages can call the
// REST, Connect and gRPC-Web APIs. Exact origins are echoed with Access-Control-Allow-Credentials; "*"
// answers "*" without credentials, as the Fetch standard requires (a wildcard with credentials is
// refused by browsers). Requests without an Origin header (every non-browser client) pass untouched.
type cors struct {
	any     bool
	origins map[string]bool
}

func newCORS(allowed []string) *cors {
	c := &cors{origins: map[string]bool{}}
	for _, o := range allowed {
		if o == "*" {
			c.any = true
			continue
		}
		c.origins[strings.TrimSuffix(o, "/")] = true
	}
	return c
}

// corsExposed are the response headers a page may read: RPC status and metadata (Connect, gRPC-Web),
// the serving workers, rate-limit hints and request ids.
const corsExposed = "Grpc-Status, Grpc-Message, Grpc-Status-Details-Bin, Connect-Content-Encoding, " +
	"Connect-Accept-Encoding, X-Sluice-Worker, X-Sluice-Prefill-Worker, Retry-After, X-Request-Id, Content-Type"

const corsMethods = "GET, POST, PUT, PATCH, DELETE, OPTIONS"

func (c *cors) wrap(h http.Handler) http.Handler {
	if !c.any && len(c.origins) == 0 {
		// CORS off: a preflight is refused with a clear error instead of a bare 404/405.
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if isPreflight(r) {
				apierror.New(http.StatusForbidden, apierror.CodeOriginNotAllowed,
					"cross-origin requests are not enabled (see --cors-allowed-origins)", nil).WriteHTTP(w)
				return
			}
			h.ServeHTTP(w, r)
		})
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		origin := r.Header.Get("Origin")
		if origin == "" {
			h.ServeHTTP(w, r)
			return
		}
		hdr := w.Header()
		hdr.Add("Vary", "Origin")
		exact := c.origins[origin]
		if !exact && !c.any {
			if isPreflight(r) {
				apierror.New(http.StatusForbidden, apierror.CodeOriginNotAllowed,
					"origin "+origin+" is not allowed", nil).WriteHTTP(w)
				return
			}
			h.ServeHTTP(w, r) // no CORS headers: the browser keeps the response from the page
			return
		}
		if exact {
			hdr.Set("Access-Control-Allow-Origin", origin)
			hdr.Set("Access-Control-Allow-Credentials", "true")
		} else {
			hdr.Set("Access-Control-Allow-Origin", "*")
		}
		if isPreflight(r) {
			hdr.Add("Vary", "Access-Control-Request-Method")
			hdr.Add("Vary", "Access-Control-Request-Headers")
			hdr.Set("Access-Control-Allow-Methods", corsMethods)
			if req := r.Header.Get("Access-Control-Request-Headers"); req != "" && validHeaderList(req) {
				// Echoing the names covers the SDKs' own headers (x-stainless-*, connect-*, x-grpc-web);
				// Authorization needs naming explicitly, which echoing does ("*" would not cover it).
				hdr.Set("Access-Control-Allow-Headers", req)
			}
			hdr.Set("Access-Control-Max-Age", "7200")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		hdr.Set("Access-Control-Expose-Headers", corsExposed)
		h.ServeHTTP(w, r)
	})
}

func isPreflight(r *http.Request) bool {
	return r.Method == http.MethodOptions && r.Header.Get("Access-Control-Request-Method") != ""
}

// validHeaderList accepts a comma-separated list of header names (RFC 9110 tokens), so that nothing but
// header names is echoed back.
func validHeaderList(s string) bool {
	if len(s) > 4096 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~, ", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// securityHeaders marks admin responses: never cached, never sniffed or framed, no referrer, and HSTS
// when the listener serves TLS. Admin JSON holds worker URLs and settings; a browser must not keep it.
func securityHeaders(h http.Handler, hsts bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hdr := w.Header()
		hdr.Set("Cache-Control", "no-store")
		hdr.Set("X-Content-Type-Options", "nosniff")
		hdr.Set("X-Frame-Options", "DENY")
		hdr.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
		hdr.Set("Referrer-Policy", "no-referrer")
		if hsts {
			hdr.Set("Strict-Transport-Security", "max-age=31536000")
		}
		h.ServeHTTP(w, r)
	})
}
