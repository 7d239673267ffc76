package toolcall_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sluicegw/sluice/internal/toolcall"
)

// longAnswer is a call whose arguments run to about 8 kB (some 2,000 tokens), cut into 4-byte deltas as
// a detokenizer would give them.
func longAnswer(parser string) []string {
	var a strings.Builder
	a.WriteString("{")
	for i := range 400 {
		if i > 0 {
			a.WriteString(", ")
		}
		fmt.Fprintf(&a, `"k%d": "value %d"`, i, i)
	}
	a.WriteString("}")
	text := "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": " + a.String() + "}\n</tool_call>"
	if parser == "deepseek" {
		text = "Let me check.\n" + dsCallsBegin + dsCallBegin + "function" + dsSep + "f\n```json\n" + a.String() + "\n```" + dsCallEnd + dsCallsEnd
	}
	var d []string
	for len(text) > 4 {
		d = append(d, text[:4])
		text = text[4:]
	}
	return append(d, text)
}

// BenchmarkStream streams the long answer; BenchmarkWhole parses it in one push, the baseline: their
// ratio is what streaming costs over parsing once.
func BenchmarkStream(b *testing.B) {
	for _, parser := range []string{"qwen", "deepseek"} {
		deltas := longAnswer(parser)
		b.Run(parser, func(b *testing.B) {
			for b.Loop() {
				p, _ := toolcall.New(parser, toolcall.Options{})
				for _, d := range deltas {
					p.Push(d)
				}
				p.Flush()
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(deltas)), "ns/delta")
		})
	}
}

func BenchmarkWhole(b *testing.B) {
	for _, parser := range []string{"qwen", "deepseek"} {
		text := strings.Join(longAnswer(parser), "")
		b.Run(parser, func(b *testing.B) {
			for b.Loop() {
				_, _, _ = toolcall.Parse(parser, toolcall.Options{}, text)
			}
		})
	}
}
