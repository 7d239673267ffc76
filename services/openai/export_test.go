package openai

import "github.com/sluicegw/sluice/internal/dispatch"

// NewWithJSONHook is New with a hook told each time a request is rendered as JSON: the typed path's
// tests fail when it is taken where it must not be.
func NewWithJSONHook(d *dispatch.Dispatcher, hook func(dispatch.Route)) *Service {
	return &Service{d: d, onJSON: hook}
}
