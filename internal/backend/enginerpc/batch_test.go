package enginerpc

import (
	"net/http"
	"slices"
	"testing"

	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// A batch of prompts is one Generate per prompt; completions' choices come back prompt by prompt
// (index = prompt * n + sample) with the usage summed, /generate's objects as one list.
func TestBatches(t *testing.T) {
	for _, p := range protocols {
		f := newFake("ok")
		tr, url := setup(t, p, f)
		resp := post(t, tr, t.Context(), url, "/v1/completions", `{"model":"m","prompt":["a",[98,99]],"n":2}`)
		got := decode[struct {
			ID      string `json:"id"`
			Choices []struct {
				Index int    `json:"index"`
				Text  string `json:"text"`
			} `json:"choices"`
			Usage struct {
				PromptTokens     int `json:"prompt_tokens"`
				CompletionTokens int `json:"completion_tokens"`
				TotalTokens      int `json:"total_tokens"`
			} `json:"usage"`
		}](t, resp)
		if resp.StatusCode != http.StatusOK || len(got.Choices) != 4 || got.ID != "cmpl-r1" {
			t.Fatalf("%s: status %d, %+v", p, resp.StatusCode, got)
		}
		var texts []string
		for i, c := range got.Choices {
			if c.Index != i {
				t.Errorf("%s: choice %d has index %d", p, i, c.Index)
			}
			texts = append(texts, c.Text)
		}
		if !slices.Equal(texts, []string{"ok0", "ok1", "ok0", "ok1"}) {
			t.Errorf("%s: texts %q", p, texts)
		}
		if u := got.Usage; u.PromptTokens != 3 || u.CompletionTokens != 4*4 || u.TotalTokens != 19 {
			t.Errorf("%s: usage %+v, want 3 prompt and 16 completion tokens", p, u)
		}
		var prompts [][]uint32
		if p == enginegrpc.SGLang {
			for _, r := range f.sglang {
				prompts = append(prompts, r.GetTokenized().GetInputIds())
			}
		} else {
			for _, r := range f.vllm {
				prompts = append(prompts, r.GetTokenized().GetInputIds())
			}
		}
		slices.SortFunc(prompts, func(a, b []uint32) int { return len(a) - len(b) })
		if len(prompts) != 2 || !slices.Equal(prompts[0], []uint32{'a'}) || !slices.Equal(prompts[1], []uint32{98, 99}) {
			t.Errorf("%s: the engine got prompts %v, want one Generate per prompt", p, prompts)
		}
	}
	f := newFake("yo")
	tr, url := setup(t, enginegrpc.SGLang, f)
	gen := decode[[]struct {
		Text string `json:"text"`
	}](t, post(t, tr, t.Context(), url, "/generate", `{"text":["a","b","c"]}`))
	if len(gen) != 3 || gen[2].Text != "yo" || len(f.sglang) != 3 {
		t.Errorf("generate batch: %+v, %d Generate calls", gen, len(f.sglang))
	}
}

// SGLang PD's batch gives each prompt its own bootstrap entry (dispatch writes lists); each prompt's
// Generate carries its own room.
func TestBatchBootstrapPerPrompt(t *testing.T) {
	f := newFake("ok")
	tr, url := setup(t, enginegrpc.SGLang, f)
	resp := post(t, tr, t.Context(), url, "/v1/completions",
		`{"model":"m","prompt":["a","b"],"bootstrap_host":["h","h"],"bootstrap_port":[8998,8998],"bootstrap_room":[11,22]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
	resp.Body.Close()
	rooms := map[string]int32{}
	for _, r := range f.sglang {
		rooms[string(rune(r.GetTokenized().GetInputIds()[0]))] = r.GetDisaggregatedParams().GetBootstrapRoom()
	}
	if rooms["a"] != 11 || rooms["b"] != 22 {
		t.Errorf("rooms by prompt %v, want a:11 b:22", rooms)
	}
}
