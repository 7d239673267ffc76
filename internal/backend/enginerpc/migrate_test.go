package enginerpc

import (
	"errors"
	"testing"

	"connectrpc.com/connect"

	"github.com/sluicegw/sluice/internal/backend/body"
)

func TestRemainingTokens(t *testing.T) {
	for _, tc := range []struct {
		name     string
		max      *int
		min      uint32
		produced int
		wantMax  *int
		wantMin  uint32
	}{
		{name: "no max_tokens stays unset", min: 0, produced: 4},
		{name: "max reduced", max: new(12), produced: 5, wantMax: new(7)},
		{name: "min reduced", max: new(12), min: 8, produced: 5, wantMax: new(7), wantMin: 3},
		{name: "min reached", max: new(12), min: 5, produced: 5, wantMax: new(7)},
		{name: "never below zero", max: new(3), produced: 5, wantMax: new(0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gotMax, gotMin := remaining(tc.max, tc.min, tc.produced)
			if (gotMax == nil) != (tc.wantMax == nil) || gotMax != nil && *gotMax != *tc.wantMax || gotMin != tc.wantMin {
				t.Errorf("remaining = %v, %d; want %v, %d", deref(gotMax, -1), gotMin, deref(tc.wantMax, -1), tc.wantMin)
			}
			if tc.max != nil && gotMax == tc.max {
				t.Error("the request's max_tokens was changed in place")
			}
		})
	}
}

// fakeStream is a Generate stream of given events.
type fakeStream struct {
	evs []event
	cur event
}

func (f *fakeStream) Receive() bool {
	if len(f.evs) == 0 {
		return false
	}
	f.cur, f.evs = f.evs[0], f.evs[1:]
	return true
}
func (f *fakeStream) Err() error   { return nil }
func (f *fakeStream) Close() error { return nil }
func (f *fakeStream) event() event { return f.cur }

// TestResumedStreamUsage: a sample that read 2 tokens of its first stream and the rest from a
// continuation (whose engine counts the longer prompt, and its own completion) reports the client's
// prompt once and every generated token once, in both protocols' counting, including a continuation
// whose first message is its Complete.
func TestResumedStreamUsage(t *testing.T) {
	tok := testTokenizer(t)
	ids := tok.EncodeUint32("abcd")
	if len(ids) < 4 {
		t.Fatalf("test tokenizer gave %v", ids)
	}
	for _, tc := range []struct {
		name         string
		cumulative   bool
		continuation []event
	}{
		{name: "sglang", cumulative: true, continuation: []event{
			{ids: ids[2:3], prompt: 12, cached: 11, completion: 1},
			{ids: ids[3:4], prompt: 12, cached: 11, completion: 2},
			{ids: ids[3:4], complete: true, finish: "length", prompt: 12, cached: 11, completion: 2}}},
		{name: "vllm", cumulative: false, continuation: []event{
			{ids: ids[2:3], prompt: 12, completion: 1},
			{ids: ids[3:4], prompt: 12, completion: 1},
			{ids: ids[3:4], complete: true, finish: "length", prompt: 12, completion: 2}}},
		{name: "sglang complete first", cumulative: true, continuation: []event{
			{ids: ids[2:4], complete: true, finish: "length", prompt: 12, completion: 2}}},
		{name: "vllm complete first", cumulative: false, continuation: []event{
			{ids: ids[2:4], complete: true, finish: "length", prompt: 12, completion: 2}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &call{route: body.RouteCompletions, stream: true, n: 1}
			ss := newSamples(tok, c, tc.cumulative)
			first := []event{{ids: ids[0:1], prompt: 10, cached: 3, completion: 1}, {ids: ids[1:2], prompt: 10, cached: 3, completion: 1}}
			if tc.cumulative {
				first[1].completion = 2
			}
			for _, ev := range first {
				if _, _, err := ss.add(ev); err != nil {
					t.Fatal(err)
				}
			}
			s := ss.all[0]
			rs := &resumedStream{genStream: &fakeStream{evs: tc.continuation}, cumulative: tc.cumulative, base: uint32(produced(s))}
			for rs.Receive() {
				if _, _, err := ss.add(rs.event()); err != nil {
					t.Fatal(err)
				}
			}
			if !ss.done() || s.prompt != 10 || s.completion != 4 || s.cached != 3 {
				t.Errorf("done %v, prompt %d, completion %d, cached %d; want done, 10, 4, 3", ss.done(), s.prompt, s.completion, s.cached)
			}
			if want, _ := tok.Decode(toInts(ids[:4]), true); string(s.text) != want {
				t.Errorf("text %q, want %q (every token once)", s.text, want)
			}
		})
	}
}

// TestMigrationReason: which broken streams migrate, and under which reason label.
func TestMigrationReason(t *testing.T) {
	for _, tc := range []struct {
		cause error
		want  string
	}{
		{nil, ReasonNoComplete},
		{errEngineAborted, ReasonEngineAbort},
		{connect.NewError(connect.CodeUnavailable, errors.New("engine gone")), ReasonUnavailable},
		{connect.NewError(connect.CodeAborted, errors.New("aborted")), ReasonAborted},
		{connect.NewError(connect.CodeInternal, errors.New("incomplete envelope")), ReasonReset},
		// connect says canceled for a connection the engine's host reset; the writer has ruled out
		// the client's own cancellation before it asks.
		{connect.NewError(connect.CodeCanceled, errors.New("read: connection reset by peer")), ReasonReset},
		{connect.NewError(connect.CodeInvalidArgument, errors.New("bad request")), ""},
		{connect.NewError(connect.CodeResourceExhausted, errors.New("too long")), ""},
	} {
		if got := migrationReason(tc.cause); got != tc.want {
			t.Errorf("migrationReason(%v) = %q, want %q", tc.cause, got, tc.want)
		}
	}
}
