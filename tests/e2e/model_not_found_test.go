package e2e

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestUnknownModelNamesIt: a request for a model no worker serves gets 404 model_not_found whose
// message names the model, as OpenAI's does ("The model `x` does not exist"), read through the
// official SDK: a typo in the model name shows in the error.
func TestUnknownModelNamesIt(t *testing.T) {
	t.Parallel()
	c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang})
	gw := startGateway(t, app.Options{}, append([]string{"--pd-disaggregation"}, pdArgs(c)...)...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))
	_, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{Model: "sim-mdl",
		Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}})
	var apiErr *openai.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound || apiErr.Code != "model_not_found" {
		t.Fatalf("unknown model: %v, want 404 model_not_found", err)
	}
	if !strings.Contains(apiErr.Message, "The model `sim-mdl` does not exist") {
		t.Errorf("message %q does not name the model", apiErr.Message)
	}
}
