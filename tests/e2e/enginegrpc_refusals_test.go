package e2e

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/sim"
)

// TestEngineGRPCRefusesMultimodal: over the engines' gRPC the gateway renders the prompt, and renders
// text only; a chat with an image part is a 400 naming messages and the part's type, and no engine is
// asked (docs/engines.md lists it as unsupported).
func TestEngineGRPCRefusesMultimodal(t *testing.T) {
	t.Parallel()
	for _, m := range pdModes() {
		if !m.engineGRPC {
			continue
		}
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			c := m.startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Engine: sim.Config{Mode: sim.ModeInstant}})
			gw := m.startGateway(t, c)
			resp, err := post(context.Background(), gw.URL+"/v1/chat/completions", `{"model":"sim-model","max_tokens":4,"messages":[{"role":"user","content":[`+
				`{"type":"text","text":"what is this?"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}]}`)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			b, _ := io.ReadAll(resp.Body)
			var e struct {
				Error struct {
					Message string  `json:"message"`
					Param   *string `json:"param"`
				} `json:"error"`
			}
			if resp.StatusCode != http.StatusBadRequest || json.Unmarshal(b, &e) != nil || e.Error.Param == nil || *e.Error.Param != "messages" ||
				!strings.Contains(e.Error.Message, "image_url") {
				t.Fatalf("status %d: %s; want 400 naming messages and image_url", resp.StatusCode, b)
			}
			for _, eng := range c.Engines {
				if n := eng.Stats().RequestsSeen; n != 0 {
					t.Errorf("%s engine saw %d generation requests, want none", eng.Role(), n)
				}
			}
		})
	}
}
