package openai

import "github.com/sluicegw/sluice/internal/dispatch"

// NewWithJSONHooks is New with hooks told each time a request is rendered as JSON and each time a
// whole answer is read from JSON: the typed path's tests fail when JSON is used where it must not be.
func NewWithJSONHooks(d *dispatch.Dispatcher, request, answer func(dispatch.Route)) *Service {
	return &Service{d: d, onJSON: request, onJSONAnswer: answer}
}
