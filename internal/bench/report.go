package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// WriteResult writes res as indented JSON to path.
func WriteResult(path string, res *Result) error {
	b, err := json.Marshal(res)
	if err != nil {
		return err
	}
	if dir := filepath.Dir(path); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
	}
	return os.WriteFile(path, b, 0o644)
}

// ReadResult reads a result file; a result without a label is named after the file.
func ReadResult(path string) (*Result, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if res.Label == "" {
		res.Label = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
	}
	return &res, nil
}

func f1(v float64) string {
	if math.IsNaN(v) {
		return "-"
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}

func f2(v float64) string { return strconv.FormatFloat(v, 'f', 2, 64) }

func countsString(m map[string]int) string {
	if len(m) == 0 {
		return "-"
	}
	keys := slices.Sorted(maps.Keys(m))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s:%d", k, m[k])
	}
	return strings.Join(parts, " ")
}

// summaryRows are the rows of the summary and compare tables.
func summaryRows() []struct {
	name string
	get  func(s *Summary) string
} {
	return []struct {
		name string
		get  func(s *Summary) string
	}{
		{"requests", func(s *Summary) string { return strconv.Itoa(s.Requests) }},
		{"succeeded", func(s *Summary) string { return strconv.Itoa(s.Succeeded) }},
		{"failed", func(s *Summary) string { return strconv.Itoa(s.Failed) }},
		{"dropped", func(s *Summary) string { return strconv.Itoa(s.Dropped) }},
		{"duration (s)", func(s *Summary) string { return f2(s.DurationSec) }},
		{"requests/s", func(s *Summary) string { return f1(s.RequestsPerSec) }},
		{"output tokens/s", func(s *Summary) string { return f1(s.OutputTokensPerSec) }},
		{"TTFT p50 (ms)", func(s *Summary) string { return f2(s.TTFT.P50) }},
		{"TTFT p90 (ms)", func(s *Summary) string { return f2(s.TTFT.P90) }},
		{"TTFT p99 (ms)", func(s *Summary) string { return f2(s.TTFT.P99) }},
		{"ITL p50 (ms)", func(s *Summary) string { return f2(s.ITL.P50) }},
		{"ITL p90 (ms)", func(s *Summary) string { return f2(s.ITL.P90) }},
		{"ITL p99 (ms)", func(s *Summary) string { return f2(s.ITL.P99) }},
		{"E2E p50 (ms)", func(s *Summary) string { return f2(s.E2E.P50) }},
		{"E2E p90 (ms)", func(s *Summary) string { return f2(s.E2E.P90) }},
		{"E2E p99 (ms)", func(s *Summary) string { return f2(s.E2E.P99) }},
		{"schedule lag p99 (ms)", func(s *Summary) string { return f2(s.ScheduleLag.P99) }},
		{"goodput", func(s *Summary) string {
			if s.SLOTTFTms > 0 {
				return fmt.Sprintf("%.3f (TTFT<=%gms)", s.Goodput, s.SLOTTFTms)
			}
			return fmt.Sprintf("%.3f", s.Goodput)
		}},
		{"errors by status", func(s *Summary) string { return countsString(s.ErrorsByStatus) }},
		{"errors by code", func(s *Summary) string { return countsString(s.ErrorsByCode) }},
	}
}

// PrintSummary writes one run's summary table.
func PrintSummary(w io.Writer, res *Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "run\t%s\n", res.Label)
	for _, row := range summaryRows() {
		fmt.Fprintf(tw, "%s\t%s\n", row.name, row.get(&res.Summary))
	}
	if len(res.Summary.Workers) > 0 {
		fmt.Fprintf(tw, "requests by worker\t%s\n", countsString(res.Summary.Workers))
	}
	return tw.Flush()
}

// PrintCompare writes the summaries side by side, one column per result.
func PrintCompare(w io.Writer, results []*Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprint(tw, "\t")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t", r.Label)
	}
	fmt.Fprintln(tw)
	for _, row := range summaryRows() {
		fmt.Fprintf(tw, "%s\t", row.name)
		for _, r := range results {
			fmt.Fprintf(tw, "%s\t", row.get(&r.Summary))
		}
		fmt.Fprintln(tw)
	}
	return tw.Flush()
}

// MarkdownTable renders rows (the first is the header) as a markdown table.
func MarkdownTable(rows [][]string) string {
	var b strings.Builder
	for i, row := range rows {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		if i == 0 {
			b.WriteString("|" + strings.Repeat("---|", len(row)) + "\n")
		}
	}
	return b.String()
}
