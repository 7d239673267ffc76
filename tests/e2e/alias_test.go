package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/dispatch"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestModelAliasCanary: a PD fleet serves two models, stable and canary, each on its own prefill and
// decode engine (which refuse a model they do not serve), behind --model-alias chat=stable:90,canary:10.
// Over 2,000 requests through the official SDK the metric per target shows each share within ±5
// points; every answer, streamed or not, names chat, not the served model; both legs of every request come from the
// target's pair; one session stays on one target; and the admin API changes the split live and
// removes the alias.
func TestModelAliasCanary(t *testing.T) {
	fleet := map[string]*sim.Cluster{}
	var args []string
	for _, m := range []string{"stable", "canary"} {
		c := startCluster(t, sim.ClusterConfig{Prefill: 1, Decode: 1, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant,
			Engine: sim.Config{Models: []string{m}}})
		fleet[m] = c
		args = append(args, pdArgs(c)...)
	}
	owner := map[string]string{} // engine URL -> its model
	for m, c := range fleet {
		for _, e := range c.Engines {
			owner[e.URL()] = m
		}
	}
	gw := startGateway(t, app.Options{}, append(args, "--pd-disaggregation", "--disable-retries",
		"--model-alias", "chat=stable:90,canary:10", "--session-header", "X-Session-Id")...)
	waitFor(t, "gateway ready", 10*time.Second, func() bool { return gw.Ready() == nil })
	client := openai.NewClient(option.WithBaseURL(gw.URL+"/v1/"), option.WithAPIKey("unused"), option.WithMaxRetries(0))

	// ask sends one chat for alias and returns the model both legs served.
	ask := func(alias string, opts ...option.RequestOption) (string, error) {
		var resp *http.Response
		c, err := client.Chat.Completions.New(context.Background(), openai.ChatCompletionNewParams{
			Model: alias, MaxTokens: openai.Int(2), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		}, append(opts, option.WithResponseInto(&resp))...)
		if err != nil {
			return "", err
		}
		if c.Model != alias {
			return "", fmt.Errorf("answer names model %q, want %q", c.Model, alias)
		}
		d, p := owner[resp.Header.Get(dispatch.HeaderWorker)], owner[resp.Header.Get(dispatch.HeaderPrefillWorker)]
		if d == "" || d != p {
			return "", fmt.Errorf("legs from %q (decode) and %q (prefill): want one target's pair", d, p)
		}
		return d, nil
	}

	const n, workers = 2000, 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if _, err := ask("chat"); err != nil {
					errs <- fmt.Errorf("request %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	counts := scrape(t, gw.URL, "sluice_model_alias_requests_total")
	stable, canary := counts["alias=chat,target=stable"], counts["alias=chat,target=canary"]
	if stable+canary != n {
		t.Fatalf("metric counts %v, want %d requests in all", counts, n)
	}
	if f := canary / n; f < 0.05 || f > 0.15 {
		t.Fatalf("canary served %.3f of %d requests, want 0.10 ± 0.05 (%v)", f, n, counts)
	}

	for s := range 10 {
		session := option.WithHeader("X-Session-Id", "conversation-"+strconv.Itoa(s))
		first, err := ask("chat", session)
		if err != nil {
			t.Fatal(err)
		}
		for range 5 {
			if got, err := ask("chat", session); err != nil || got != first {
				t.Fatalf("session %d moved from %s to %s (%v)", s, first, got, err)
			}
		}
	}
	if got, err := ask("canary"); err != nil || got != "canary" {
		t.Fatalf("a served model's own name: %s, %v", got, err)
	}
	stream := client.Chat.Completions.NewStreaming(context.Background(), openai.ChatCompletionNewParams{
		Model: "chat", MaxTokens: openai.Int(4), Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
	})
	chunks := 0
	for stream.Next() {
		if m := stream.Current().Model; m != "chat" {
			t.Fatalf("stream chunk %d names model %q, want chat", chunks, m)
		}
		chunks++
	}
	if err := stream.Err(); err != nil || chunks == 0 {
		t.Fatalf("stream: %d chunks, %v", chunks, err)
	}

	// Live: the admin API moves every request to the canary, then removes the alias.
	status, body := adminCall(t, http.MethodPut, gw.URL+"/admin/v1/model_aliases/chat", `{"targets":[{"model":"stable","weight":0},{"model":"canary","weight":1}]}`)
	if status != http.StatusOK || !strings.Contains(body, `"canary"`) {
		t.Fatalf("PUT alias: %d %s", status, body)
	}
	// protojson varies its whitespace on purpose: compare decoded.
	var listed struct {
		Aliases []struct {
			Alias   string
			Targets []struct {
				Model  string
				Weight int
			}
		}
	}
	status, body = adminCall(t, http.MethodGet, gw.URL+"/admin/v1/model_aliases", "")
	if err := json.Unmarshal([]byte(body), &listed); status != http.StatusOK || err != nil {
		t.Fatalf("GET aliases after the change: %d %s (%v)", status, body, err)
	}
	if got := fmt.Sprint(listed.Aliases); got != "[{chat [{stable 0} {canary 1}]}]" {
		t.Fatalf("GET aliases after the change: %s", got)
	}
	before := scrape(t, gw.URL, "sluice_model_alias_requests_total")["alias=chat,target=canary"]
	for i := range 20 {
		if got, err := ask("chat"); err != nil || got != "canary" {
			t.Fatalf("request %d after the live change went to %s (%v), want canary", i, got, err)
		}
	}
	if after := scrape(t, gw.URL, "sluice_model_alias_requests_total")["alias=chat,target=canary"]; after != before+20 {
		t.Fatalf("canary counter %v -> %v, want +20", before, after)
	}
	if status, body := adminCall(t, http.MethodPut, gw.URL+"/admin/v1/model_aliases/chat", `{"targets":[]}`); status != http.StatusBadRequest {
		t.Fatalf("PUT an alias without targets: %d %s, want 400", status, body)
	}
	if status, body := adminCall(t, http.MethodDelete, gw.URL+"/admin/v1/model_aliases/chat", ""); status != http.StatusOK {
		t.Fatalf("DELETE alias: %d %s", status, body)
	}
	var apiErr *openai.Error
	if _, err := ask("chat"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Fatalf("chat after its alias was deleted: %v, want 404 (no model of that name)", err)
	}
}

// adminCall sends one admin REST request and returns its status and body.
func adminCall(t *testing.T, method, url, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}
