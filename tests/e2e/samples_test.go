package e2e

import (
	"context"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestSplitSamplesDiffer: SGLang PD cannot run n > 1, so the gateway sends n single-sample requests
// (each choice 0 on its engines, each on its own bootstrap room); like real sampling, the n choices the
// client gets differ. A seed fixes them: seeded samples are alike, as on the engines.
func TestSplitSamplesDiffer(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Engine: instantEngine()})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	cl := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("sk-unused"), option.WithMaxRetries(0))
	ask := func(seed *int64) []string {
		t.Helper()
		p := openai.ChatCompletionNewParams{Model: "sim-model", N: openai.Int(3), MaxTokens: openai.Int(8),
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("tell me a story")}}
		if seed != nil {
			p.Seed = openai.Int(*seed)
		}
		resp, err := cl.Chat.Completions.New(context.Background(), p)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Choices) != 3 {
			t.Fatalf("%d choices, want 3", len(resp.Choices))
		}
		out := make([]string, 3)
		for _, ch := range resp.Choices {
			out[ch.Index] = ch.Message.Content
		}
		return out
	}
	got := ask(nil)
	if got[0] == got[1] || got[1] == got[2] || got[0] == got[2] {
		t.Errorf("unseeded choices are not all different: %q", got)
	}
	seeded := ask(ptr[int64](42))
	if seeded[0] != seeded[1] || seeded[1] != seeded[2] {
		t.Errorf("seeded single-sample requests differ: %q", seeded)
	}
	if st := c.ByRole(sim.RoleDecode)[0].Stats(); st.Completed != 6 {
		t.Errorf("decode completed %d requests, want 6 single-sample ones", st.Completed)
	}
}
