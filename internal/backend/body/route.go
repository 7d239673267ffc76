package body

// Route is one of the generation endpoints the gateway forwards to engines.
type Route uint8

// The generation routes. The zero Route is invalid.
const (
	RouteChat        Route = iota + 1 // POST /v1/chat/completions (OpenAI)
	RouteCompletions                  // POST /v1/completions (OpenAI)
	RouteGenerate                     // POST /generate (SGLang native)
)

// Path returns the route's URL path.
func (r Route) Path() string {
	switch r {
	case RouteChat:
		return "/v1/chat/completions"
	case RouteCompletions:
		return "/v1/completions"
	case RouteGenerate:
		return "/generate"
	}
	return auxPath(r) // aux.go; "" for an invalid route
}

// String returns a short label, usable as a low-cardinality metric label.
func (r Route) String() string {
	switch r {
	case RouteChat:
		return "chat"
	case RouteCompletions:
		return "completions"
	case RouteGenerate:
		return "generate"
	}
	if r.IsAux() {
		return auxString(r)
	}
	return "unknown"
}

// RouteFromPath maps a URL path to its Route; ok is false for other paths.
func RouteFromPath(path string) (Route, bool) {
	switch path {
	case "/v1/chat/completions":
		return RouteChat, true
	case "/v1/completions":
		return RouteCompletions, true
	case "/generate":
		return RouteGenerate, true
	}
	return auxFromPath(path)
}
