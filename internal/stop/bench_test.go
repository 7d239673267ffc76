package stop_test

import (
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/stop"
)

// BenchmarkFeed is the per-token cost of a Matcher with 4 stop strings over a 2k-token stream that
// never stops, prose whose pieces now and then begin a stop string ("<", "#"), so both the
// nothing-held path and holding are measured.
func BenchmarkFeed(b *testing.B) {
	pieces := strings.Fields("The quick brown fox jumps over the lazy dog ; < div > ## heading \n and then some more words follow here")
	const n = 2048
	toks := make([]string, n)
	for i := range toks {
		toks[i] = " " + pieces[i%len(pieces)]
	}
	p := stop.Params{Stop: []string{"</answer>", "\n\nUser:", "<|stop|>", "###"}, EOS: []int{151645}, StopTokenIDs: []int{151643}}
	b.ReportAllocs()
	for b.Loop() {
		m, err := stop.New(p)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range toks {
			if _, done := m.Feed(42, s); done {
				b.Fatal("stopped")
			}
		}
		m.Finish()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/token")
}
