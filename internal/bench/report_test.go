package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleResult(label string, scale float64) *Result {
	var recs []Record
	for i := 0; i < 50; i++ {
		recs = append(recs, Record{Index: int64(i), Status: 200, TTFTMS: scale * float64(i+1), E2EMS: scale * float64(2*i+5), OutputTokens: 3})
	}
	recs = append(recs, Record{Status: 429, Code: "pd_prefill_queue_full"})
	return &Result{Label: label, Records: recs, Summary: Summarize(recs, 0, 1e9, 0)}
}

// wellFormed decodes the whole document with encoding/xml and counts elements by name.
func wellFormed(t *testing.T, doc []byte) map[string]int {
	t.Helper()
	counts := map[string]int{}
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			return counts
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, doc)
		}
		if se, ok := tok.(xml.StartElement); ok {
			counts[se.Name.Local]++
		}
	}
}

func TestCompareSVG(t *testing.T) {
	results := []*Result{sampleResult("direct <a&b>", 0.1), sampleResult("sluice", 0.3), {Label: "empty"}}
	var b bytes.Buffer
	if err := WriteCompareSVG(&b, results); err != nil {
		t.Fatal(err)
	}
	counts := wellFormed(t, b.Bytes())
	// Two panels, one CDF per non-empty result in each.
	if counts["svg"] != 1 || counts["polyline"] != 4 {
		t.Fatalf("elements %v: want 1 svg and 4 polylines", counts)
	}
	if !strings.Contains(b.String(), "direct &lt;a&amp;b&gt;") {
		t.Fatal("label not escaped into the legend")
	}
}

func TestPrintCompare(t *testing.T) {
	var b bytes.Buffer
	if err := PrintCompare(&b, []*Result{sampleResult("a", 1), sampleResult("b", 2)}); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(b.String(), "\n")
	if f := strings.Fields(lines[0]); len(f) != 2 || f[0] != "a" || f[1] != "b" {
		t.Fatalf("header %q, want the two labels", lines[0])
	}
	var ttft string
	for _, l := range lines {
		if strings.Contains(l, "TTFT p50") {
			ttft = l
		}
	}
	// p50 of 1..50 is 25.5; scaled by 2 it is 51.
	if f := strings.Fields(ttft); len(f) != 5 || f[3] != "25.50" || f[4] != "51.00" {
		t.Fatalf("TTFT row %q", ttft)
	}
	if !strings.Contains(b.String(), "pd_prefill_queue_full:1") {
		t.Fatalf("error codes missing:\n%s", b.String())
	}
}

func TestResultRoundTrip(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "my-run.json")
	res := sampleResult("", 1)
	if err := WriteResult(path, res); err != nil {
		t.Fatal(err)
	}
	got, err := ReadResult(path)
	if err != nil {
		t.Fatal(err)
	}
	if got.Label != "my-run" || len(got.Records) != len(res.Records) || got.Summary.Succeeded != 50 {
		t.Fatalf("label %q, %d records, summary %+v", got.Label, len(got.Records), got.Summary)
	}
}

// TestMainRunAndCompare drives the command line end to end against a local server.
func TestMainRunAndCompare(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, chatChunk("a")+chatChunk("b")+"data: {\"choices\":[],\"usage\":{\"completion_tokens\":2}}\n\ndata: [DONE]\n\n")
	}))
	defer srv.Close()
	dir := t.TempDir()
	var files []string
	for _, loop := range [][]string{{"--concurrency", "4"}, {"--rate", "500"}} {
		out := filepath.Join(dir, strings.TrimLeft(loop[0], "-")+".json")
		files = append(files, out)
		args := append([]string{"run", "--url", srv.URL, "--requests", "30", "--stream", "--quiet", "--out", out,
			"--workload", "prefix", "--prefixes", "2", "--prefix-tokens", "16", "--turns", "2", "--conversations", "3"}, loop...)
		var stdout, stderr bytes.Buffer
		if code := Main(context.Background(), args, &stdout, &stderr); code != 0 {
			t.Fatalf("run exited %d: %s", code, stderr.String())
		}
		if !strings.Contains(stdout.String(), "succeeded") {
			t.Fatalf("no summary table:\n%s", stdout.String())
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		var res Result
		if err := json.Unmarshal(b, &res); err != nil {
			t.Fatal(err)
		}
		if res.Summary.Succeeded != 30 || len(res.Records) != 30 || res.Params.Workload.Kind != WorkloadPrefix || res.Label != strings.TrimSuffix(filepath.Base(out), ".json") {
			t.Fatalf("result: label %q, %d records, summary %+v", res.Label, len(res.Records), res.Summary)
		}
	}
	svg := filepath.Join(dir, "plot.svg")
	var stdout, stderr bytes.Buffer
	if code := Main(context.Background(), append([]string{"compare"}, append(files, "--out", svg)...), &stdout, &stderr); code != 0 {
		t.Fatalf("compare exited %d: %s", code, stderr.String())
	}
	if !strings.Contains(stdout.String(), "concurrency") || !strings.Contains(stdout.String(), "rate") {
		t.Fatalf("compare table lacks the labels:\n%s", stdout.String())
	}
	b, err := os.ReadFile(svg)
	if err != nil {
		t.Fatal(err)
	}
	if counts := wellFormed(t, b); counts["polyline"] != 4 {
		t.Fatalf("elements %v: want 4 polylines", counts)
	}
	// Usage errors exit 2.
	if code := Main(context.Background(), []string{"run", "--url", srv.URL, "--rate", "1", "--concurrency", "1", "--requests", "1"}, io.Discard, io.Discard); code != 2 {
		t.Fatalf("conflicting flags exited %d, want 2", code)
	}
}
