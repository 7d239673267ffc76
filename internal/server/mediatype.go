package server

import (
	"mime"
	"net/http"
	"strings"

	"github.com/sluicegw/sluice/internal/apierror"
)

// requireJSON answers 415 to a request body declared as anything but JSON on a JSON route. A body
// without a Content-Type is read as JSON, as vLLM's and SGLang's FastAPI servers read it; a declared
// other type (curl -d sends application/x-www-form-urlencoded) is refused as the Rust gateway's axum
// Json extractor refuses it, rather than failing later as a JSON parse error that hides the cause.
func requireJSON(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if ct := r.Header.Get("Content-Type"); ct != "" && hasBody(r.Method) && !isJSON(ct) {
			apierror.New(http.StatusUnsupportedMediaType, apierror.CodeUnsupportedMediaType,
				"Content-Type "+ct+" is not supported: send the body as JSON with Content-Type: application/json", nil).WriteHTTP(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func hasBody(method string) bool {
	return method == http.MethodPost || method == http.MethodPut || method == http.MethodPatch
}

// isJSON accepts application/json and any application/*+json, with parameters (charset).
func isJSON(ct string) bool {
	if ct == "application/json" {
		return true // what every SDK sends: no parse, no allocation
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil {
		return false
	}
	sub, ok := strings.CutPrefix(mt, "application/")
	return ok && (sub == "json" || strings.HasSuffix(sub, "+json"))
}
