package openai

import (
	"io"
	"strings"
	"testing"

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
	tr := workerrpc.NewGRPCTransport(workerrpc.RoleRegular, h2c)
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
