package body

import (
	"errors"
	"testing"
)

// The inputs of admission's token estimate and priority.
func TestParseRequestPromptSizeAndPriority(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		route     Route
		body      string
		chars     int
		ids       int
		prio      int
		hasPrio   bool
		wantParam string
	}{
		{name: "chat contents", route: RouteChat, body: `{"model":"m","messages":[{"role":"system","content":"abcd"},{"role":"user","content":[{"type":"text","text":"ef"}]}]}`, chars: len("abcd ef")},
		{name: "completions string", route: RouteCompletions, body: `{"model":"m","prompt":"hello world"}`, chars: 11},
		{name: "completions batch of strings", route: RouteCompletions, body: `{"model":"m","prompt":["abc","de"]}`, chars: 5},
		{name: "completions token ids", route: RouteCompletions, body: `{"model":"m","prompt":[5,6,7]}`, ids: 3},
		{name: "completions batch of token arrays", route: RouteCompletions, body: `{"model":"m","prompt":[[1,2],[3],[4,5,6]]}`, ids: 6},
		{name: "generate text batch", route: RouteGenerate, body: `{"text":["abc","defg"]}`, chars: 7},
		{name: "generate input_ids", route: RouteGenerate, body: `{"input_ids":[1,2,3,4]}`, ids: 4},
		{name: "generate input_ids batch", route: RouteGenerate, body: `{"input_ids":[[1,2],[3,4,5]]}`, ids: 5},
		{name: "priority", route: RouteChat, body: `{"model":"m","priority":-3,"messages":[{"role":"user","content":"x"}]}`, chars: 1, prio: -3, hasPrio: true},
		{name: "priority on generate", route: RouteGenerate, body: `{"text":"x","priority":7}`, chars: 1, prio: 7, hasPrio: true},
		{name: "null priority", route: RouteChat, body: `{"model":"m","priority":null,"messages":[{"role":"user","content":"x"}]}`, chars: 1},
		{name: "string priority", route: RouteChat, body: `{"model":"m","priority":"high","messages":[{"role":"user","content":"x"}]}`, wantParam: "priority"},
		{name: "fractional priority", route: RouteChat, body: `{"model":"m","priority":1.5,"messages":[{"role":"user","content":"x"}]}`, wantParam: "priority"},
		{name: "huge priority", route: RouteChat, body: `{"model":"m","priority":1e12,"messages":[{"role":"user","content":"x"}]}`, wantParam: "priority"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := ParseRequest(tt.route, []byte(tt.body))
			if tt.wantParam != "" {
				var re *RequestError
				if !errors.As(err, &re) || re.Param != tt.wantParam {
					t.Fatalf("err = %v, want a RequestError on %q", err, tt.wantParam)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if r.PromptChars != tt.chars || r.PromptTokenIDs != tt.ids || r.Priority != tt.prio || r.HasPriority != tt.hasPrio {
				t.Errorf("chars %d ids %d priority %d/%v, want %d %d %d/%v", r.PromptChars, r.PromptTokenIDs, r.Priority, r.HasPriority,
					tt.chars, tt.ids, tt.prio, tt.hasPrio)
			}
		})
	}
}
