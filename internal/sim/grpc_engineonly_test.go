package sim

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	workerv1 "github.com/sluicegw/sluice/gen/sluice/worker/v1"
)

// An engine-only server is what a real engine serves: its protocol and grpc.health.v1, not
// sluice.worker.v1. With byte token ids its output ids are its text's bytes, so a byte-level tokenizer
// decodes them.
func TestEngineGRPCOnlyWithByteTokenIDs(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{Mode: ModeInstant, InstantOutputTokens: 12, GRPC: true, EngineGRPCOnly: true, ByteTokenIDs: true, Seed: 5})
	conn := grpcConn(t, e)
	ctx := context.Background()

	_, err := workerv1.NewLoadServiceClient(conn).GetLoad(ctx, &workerv1.GetLoadRequest{})
	wantCode(t, err, codes.Unimplemented, "")
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health = %v, %v; want SERVING", h, err)
	}

	client := sglangpb.NewSglangSchedulerClient(conn)
	_, whole, err := sglangRun(ctx, client, sglangReq("w", "tell me a story", 12, false))
	if err != nil {
		t.Fatal(err)
	}
	var text []byte
	for _, id := range whole.GetOutputIds() {
		if id > 255 {
			t.Fatalf("output id %d is not a byte", id)
		}
		text = append(text, byte(id))
	}
	if !utf8.Valid(text) || len(strings.Fields(string(text))) != 12 || whole.GetCompletionTokens() != 12 {
		t.Errorf("output %q (%d tokens counted); want 12 words of text", text, whole.GetCompletionTokens())
	}

	// Streamed, the chunks carry the same bytes, one engine token each.
	chunks, _, err := sglangRun(ctx, client, sglangReq("s", "tell me a story", 12, true))
	if err != nil {
		t.Fatal(err)
	}
	var streamed []byte
	for _, ch := range chunks {
		for _, id := range ch.GetTokenIds() {
			streamed = append(streamed, byte(id))
		}
	}
	if string(streamed) != string(text) || len(chunks) != 12 {
		t.Errorf("streamed %q in %d chunks; want %q in 12", streamed, len(chunks), text)
	}
}
