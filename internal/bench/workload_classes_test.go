package bench

import (
	"context"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestClassesWorkload(t *testing.T) {
	cfg := WorkloadConfig{Kind: WorkloadClasses, Classes: []ClassConfig{
		{Name: "short", Share: 9, PromptTokens: 16, MaxTokens: 4},
		{Name: "long", Share: 1, PromptTokens: 64, MaxTokens: 2, Header: map[string]string{"X-Sluice-Priority": "10"}},
	}}
	g, err := NewGenerator(cfg, 3)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	for i := range int64(10000) {
		p := g.Prompt(i)
		counts[p.Class]++
		words := len(strings.Fields(p.Messages[0].Content))
		switch p.Class {
		case "short":
			if words != 16 || p.MaxTokens != 4 || p.Header != nil {
				t.Fatalf("short prompt %d words, max %d, header %v", words, p.MaxTokens, p.Header)
			}
		case "long":
			if words != 64 || p.MaxTokens != 2 || p.Header["X-Sluice-Priority"] != "10" {
				t.Fatalf("long prompt %d words, max %d, header %v", words, p.MaxTokens, p.Header)
			}
		}
		if q := g.Prompt(i); q.Class != p.Class || q.Messages[0].Content != p.Messages[0].Content {
			t.Fatal("not deterministic")
		}
	}
	if counts["long"] < 900 || counts["long"] > 1100 {
		t.Errorf("long share %d/10000, want about 1000", counts["long"])
	}
	for _, bad := range []WorkloadConfig{
		{Kind: WorkloadClasses},
		{Kind: WorkloadClasses, Classes: []ClassConfig{{Name: "x", Share: 0, PromptTokens: 1, MaxTokens: 1}}},
		{Kind: WorkloadClasses, Classes: []ClassConfig{{Name: "", Share: 1, PromptTokens: 1, MaxTokens: 1}}},
		{Kind: WorkloadClasses, Classes: []ClassConfig{{Name: "x", Share: 1, PromptTokensMin: 8, PromptTokensMax: 4, MaxTokens: 1}}},
		{Kind: WorkloadClasses, Classes: []ClassConfig{{Name: "x", Share: 1, PromptTokens: 16, PromptTokensMin: 0, PromptTokensMax: 4, MaxTokens: 1}}},
	} {
		if _, err := NewGenerator(bad, 1); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

// TestClassesSpreadPrompts: a class with prompt bounds draws each request's length between them,
// deterministically, with the median at their geometric mean and the mean that MeanPromptTokens
// (the tenants scenario's capacity) says.
func TestClassesSpreadPrompts(t *testing.T) {
	c := ClassConfig{Name: "spread", Share: 1, PromptTokensMin: 256, PromptTokensMax: 4096, MaxTokens: 4}
	g, err := NewGenerator(WorkloadConfig{Kind: WorkloadClasses, Classes: []ClassConfig{c}}, 7)
	if err != nil {
		t.Fatal(err)
	}
	const n = 20000
	lengths := make([]float64, 0, n)
	sum := 0.0
	for i := range int64(n) {
		p := g.Prompt(i)
		w := len(strings.Fields(p.Messages[0].Content))
		if w < 256 || w > 4096 {
			t.Fatalf("prompt %d: %d words, outside [256, 4096]", i, w)
		}
		if q := g.Prompt(i); q.Messages[0].Content != p.Messages[0].Content {
			t.Fatal("not deterministic")
		}
		lengths = append(lengths, float64(w))
		sum += float64(w)
	}
	if med := NewDist(lengths).P50; med < 950 || med > 1100 {
		t.Errorf("median %v words, want about 1024", med)
	}
	if mean, want := sum/n, c.MeanPromptTokens(); math.Abs(mean-want)/want > 0.02 {
		t.Errorf("mean %.1f words, MeanPromptTokens %.1f", mean, want)
	}
	if fixed := (ClassConfig{PromptTokens: 100}).MeanPromptTokens(); fixed != 100 {
		t.Errorf("fixed class mean %v, want 100", fixed)
	}
}

func TestRunSendsHeadersAndRecordsClasses(t *testing.T) {
	var mu sync.Mutex
	seen := map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen[r.Header.Get("X-Sluice-Priority")+"/"+r.Header.Get("X-Sluice-Deadline-Ms")]++
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":{"content":"x"}}],"usage":{"completion_tokens":1}}`))
	}))
	defer srv.Close()
	res, err := Run(context.Background(), Config{URL: srv.URL, Concurrency: 2, Requests: 200, Seed: 5,
		Header: map[string]string{"X-Sluice-Deadline-Ms": "500", "X-Sluice-Priority": "0"},
		Workload: WorkloadConfig{Kind: WorkloadClasses, Classes: []ClassConfig{
			{Name: "low", Share: 1, PromptTokens: 4, MaxTokens: 1},
			{Name: "high", Share: 1, PromptTokens: 4, MaxTokens: 1, Header: map[string]string{"X-Sluice-Priority": "10"}},
		}}, Timeout: 5 * time.Second}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	classes := map[string]int{}
	for _, r := range res.Records {
		classes[r.Class]++
	}
	mu.Lock()
	defer mu.Unlock()
	if classes["low"]+classes["high"] != 200 || seen["0/500"] != classes["low"] || seen["10/500"] != classes["high"] {
		t.Errorf("records by class %v, headers seen %v", classes, seen)
	}
}
