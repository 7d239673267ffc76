package openai

import (
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/structpb"

	openaiv1 "github.com/sluicegw/sluice/gen/sluice/openai/v1"
	"github.com/sluicegw/sluice/internal/backend"
	"github.com/sluicegw/sluice/internal/backend/body"
	"github.com/sluicegw/sluice/internal/backend/workerrpc"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestAnswerMatchesJSON: a typed answer from a simulated worker-protocol engine becomes the same
// message as the engine JSON workerrpc renders for it, read as the JSON path reads it.
func TestAnswerMatchesJSON(t *testing.T) {
	e, err := sim.New(sim.Config{Role: sim.RoleRegular, Mode: sim.ModeInstant, GRPC: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	h2c := backend.NewH2CClient(backend.HTTPClientOptions{})
	t.Cleanup(h2c.CloseIdleConnections)
	tr := workerrpc.NewGRPCTransport(workerrpc.RoleRegular, h2c, workerrpc.WithClock(func() time.Time { return time.Unix(1700000000, 0) }))
	url := strings.Replace(e.URL(), "http://", "grpc://", 1)

	prompts, _ := structpb.NewList([]any{"one", "two"})
	for _, tc := range []struct {
		name string
		m    proto.Message
	}{
		{"chat n=2", &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: user(str("hi")), MaxTokens: ptr[int32](5), N: ptr[int32](2)}},
		{"completion batch", &openaiv1.CreateCompletionRequest{Model: "sim-model", Prompt: structpb.NewListValue(prompts), MaxTokens: ptr[int32](3)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br, call := typedRequest(tc.m, false)
			if call == nil {
				t.Fatal("left to the JSON path")
			}
			resp, err := tr.Send(t.Context(), url, workerrpc.RoleRegular, call.WithRequestID("req-1").WithTypedAnswer())
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			a := workerrpc.AnswerOf(resp.Body)
			if a == nil {
				t.Fatal("no typed answer")
			}
			raw, err := io.ReadAll(resp.Body) // the JSON the same answer renders as
			if err != nil {
				t.Fatal(err)
			}
			var want, got proto.Message
			if br.Route == body.RouteChat {
				want, got = &openaiv1.ChatCompletion{}, chatFromAnswer(a)
			} else {
				want, got = &openaiv1.Completion{}, completionFromAnswer(a)
			}
			if err := unmarshal.Unmarshal(raw, want); err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Errorf("(-JSON +typed):\n%s", d)
			}
		})
	}
}

// TestChunksMatchSSE: a typed stream from a simulated worker-protocol engine gives the messages the
// SSE of the untyped stream reads as (same seed, same clock: the same answer), and reading the typed
// stream's body gives those SSE bytes.
func TestChunksMatchSSE(t *testing.T) {
	e, err := sim.New(sim.Config{Role: sim.RoleRegular, Mode: sim.ModeInstant, GRPC: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = e.Close() })
	h2c := backend.NewH2CClient(backend.HTTPClientOptions{})
	t.Cleanup(h2c.CloseIdleConnections)
	tr := workerrpc.NewGRPCTransport(workerrpc.RoleRegular, h2c, workerrpc.WithClock(func() time.Time { return time.Unix(1700000000, 0) }))
	url := strings.Replace(e.URL(), "http://", "grpc://", 1)
	usage := &openaiv1.StreamOptions{IncludeUsage: true}
	for _, tc := range []struct {
		name string
		m    proto.Message
	}{
		{"chat n=2 usage", &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: user(str("hi")), MaxTokens: ptr[int32](5),
			N: ptr[int32](2), Seed: ptr[int32](4), StreamOptions: usage}},
		{"chat", &openaiv1.CreateChatCompletionRequest{Model: "sim-model", Messages: user(str("hi")), MaxTokens: ptr[int32](4), Seed: ptr[int32](4)}},
		{"completion usage", &openaiv1.CreateCompletionRequest{Model: "sim-model", Prompt: str("once"), MaxTokens: ptr[int32](4),
			Seed: ptr[int32](9), StreamOptions: usage}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, call := typedRequest(tc.m, true)
			if call == nil {
				t.Fatal("left to the JSON path")
			}
			call = call.WithRequestID("req-1")
			send := func(c *workerrpc.Call) *http.Response {
				resp, err := tr.Send(t.Context(), url, workerrpc.RoleRegular, c)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { resp.Body.Close() })
				return resp
			}
			sse, err := io.ReadAll(send(call).Body)
			if err != nil {
				t.Fatal(err)
			}
			var want []proto.Message
			rd := body.NewSSEReader(strings.NewReader(string(sse)))
			for {
				data, err := rd.Next()
				if err != nil || string(data) == "[DONE]" {
					break
				}
				var m proto.Message = &openaiv1.ChatCompletionChunk{}
				if _, ok := tc.m.(*openaiv1.CreateCompletionRequest); ok {
					m = &openaiv1.Completion{}
				}
				if err := unmarshal.Unmarshal(data, m); err != nil {
					t.Fatal(err)
				}
				want = append(want, m)
			}
			st := workerrpc.StreamOf(send(call.WithTypedAnswer()).Body)
			if st == nil {
				t.Fatal("no typed stream")
			}
			var got []proto.Message
			for {
				c, err := st.Next()
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := tc.m.(*openaiv1.CreateCompletionRequest); ok {
					got = append(got, completionChunk(st, c))
				} else {
					got = append(got, chatChunk(st, c))
				}
			}
			if len(want) < 2 {
				t.Fatalf("the SSE has %d chunks: %s", len(want), sse)
			}
			// The choices of n > 1 interleave as their streams run; each choice's own order is fixed.
			byChoice(want)
			byChoice(got)
			if d := cmp.Diff(want, got, protocmp.Transform()); d != "" {
				t.Errorf("(-SSE +typed):\n%s", d)
			}
			if len(want) > 0 && strings.Contains(tc.name, "n=") {
				return // the SSE bytes interleave the choices differently on each run
			}
			rendered, err := io.ReadAll(send(call.WithTypedAnswer()).Body)
			if err != nil {
				t.Fatal(err)
			}
			if string(rendered) != string(sse) {
				t.Errorf("the typed stream's body reads\n%s\nthe untyped stream's\n%s", rendered, sse)
			}
		})
	}
}

// byChoice orders stream chunks by choice index, stably (the usage chunk, which has none, last).
func byChoice(ms []proto.Message) {
	index := func(m proto.Message) int {
		switch c := m.(type) {
		case *openaiv1.ChatCompletionChunk:
			if len(c.GetChoices()) > 0 {
				return int(c.GetChoices()[0].GetIndex())
			}
		case *openaiv1.Completion:
			if len(c.GetChoices()) > 0 {
				return int(c.GetChoices()[0].GetIndex())
			}
		}
		return 1 << 30
	}
	slices.SortStableFunc(ms, func(a, b proto.Message) int { return index(a) - index(b) })
}
