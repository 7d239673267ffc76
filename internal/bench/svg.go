package bench

import (
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// CDF points are downsampled to at most this many per series.
const maxCDFPoints = 400

var palette = []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#7f7f7f", "#bcbd22"}

// cdfPanel is one plot of several empirical CDFs on a log-scaled x axis.
type cdfPanel struct {
	title  string
	series [][]float64 // sorted values (ms), one per result
}

// WriteCompareSVG writes a hand-made SVG with two panels (TTFT and end-to-end latency CDFs of the
// successful requests of each result) and a legend naming the results.
func WriteCompareSVG(w io.Writer, results []*Result) error {
	panels := []cdfPanel{{title: "TTFT (ms, log scale)"}, {title: "End-to-end latency (ms, log scale)"}}
	for _, r := range results {
		var ttft, e2e []float64
		for i := range r.Records {
			if rec := &r.Records[i]; rec.OK() {
				ttft = append(ttft, rec.TTFTMS)
				e2e = append(e2e, rec.E2EMS)
			}
		}
		slices.Sort(ttft)
		slices.Sort(e2e)
		panels[0].series = append(panels[0].series, ttft)
		panels[1].series = append(panels[1].series, e2e)
	}
	const pw, ph, margin, gap = 520.0, 340.0, 60.0, 80.0
	legendH := 22.0 * float64(len(results))
	width := 2*pw + gap + 2*margin
	height := ph + 2*margin + legendH + 20
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	for k, p := range panels {
		x0 := margin + float64(k)*(pw+gap)
		writePanel(&b, p, x0, margin, pw, ph)
	}
	ly := margin + ph + 45
	for i, r := range results {
		c := palette[i%len(palette)]
		y := ly + 22*float64(i)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", margin, y, margin+30, y, c)
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" dominant-baseline="middle">%s (n=%d, p50 TTFT %.2f ms, p99 %.2f ms)</text>`+"\n",
			margin+40, y, html.EscapeString(r.Label), len(panels[0].series[i]), r.Summary.TTFT.P50, r.Summary.TTFT.P99)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writePanel(b *strings.Builder, p cdfPanel, x0, y0, w, h float64) {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, s := range p.series {
		if len(s) == 0 {
			continue
		}
		lo = min(lo, max(s[0], 1e-3))
		hi = max(hi, max(s[len(s)-1], 1e-3))
	}
	if math.IsInf(lo, 1) {
		lo, hi = 0.1, 1000
	}
	dlo, dhi := math.Floor(math.Log10(lo)), math.Ceil(math.Log10(hi))
	if dhi <= dlo {
		dhi = dlo + 1
	}
	xOf := func(v float64) float64 {
		return x0 + (math.Log10(max(v, 1e-3))-dlo)/(dhi-dlo)*w
	}
	yOf := func(q float64) float64 { return y0 + h - q*h }

	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="14" font-weight="bold">%s</text>`+"\n", x0+w/2, y0-20, html.EscapeString(p.title))
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="none" stroke="#333"/>`+"\n", x0, y0, w, h)
	// Grid: quantiles every 0.1, decades and their 2x/5x.
	for q := 0; q <= 10; q++ {
		y := yOf(float64(q) / 10)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", x0, y, x0+w, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" dominant-baseline="middle">%.1f</text>`+"\n", x0-6, y, float64(q)/10)
	}
	for d := dlo; d <= dhi; d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if d == dhi && m > 1 {
				break
			}
			x := xOf(v)
			stroke := "#eee"
			if m == 1 {
				stroke = "#ccc"
				fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%s</text>`+"\n", x, y0+h+16, tickLabel(v))
			}
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, y0, x, y0+h, stroke)
		}
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" transform="rotate(-90 %.1f %.1f)">cumulative share</text>`+"\n", x0-40, y0+h/2, x0-40, y0+h/2)
	for i, s := range p.series {
		if len(s) == 0 {
			continue
		}
		var pts strings.Builder
		step := max(1, len(s)/maxCDFPoints)
		for k := 0; k < len(s); k += step {
			fmt.Fprintf(&pts, "%.1f,%.1f ", xOf(s[k]), yOf(float64(k+1)/float64(len(s))))
		}
		fmt.Fprintf(&pts, "%.1f,%.1f", xOf(s[len(s)-1]), yOf(1))
		fmt.Fprintf(b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", palette[i%len(palette)], pts.String())
	}
}

func tickLabel(v float64) string {
	if v >= 1 {
		return fmt.Sprintf("%.0f", v)
	}
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.3f", v), "0"), ".")
}

// WriteCDFSVG writes one panel of empirical CDFs (values in ms, log scale), one series per label.
func WriteCDFSVG(w io.Writer, title string, labels []string, series [][]float64) error {
	p := cdfPanel{title: title}
	for _, s := range series {
		s = slices.Clone(s)
		slices.Sort(s)
		p.series = append(p.series, s)
	}
	const pw, ph, margin = 720.0, 340.0, 60.0
	legendH := 22.0 * float64(len(labels))
	width, height := pw+2*margin, ph+2*margin+legendH+20
	var b strings.Builder
	fmt.Fprintf(&b, `<?xml version="1.0" encoding="UTF-8"?>`+"\n")
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	writePanel(&b, p, margin, margin, pw, ph)
	ly := margin + ph + 45
	for i, l := range labels {
		y := ly + 22*float64(i)
		fmt.Fprintf(&b, `<line x1="%.0f" y1="%.1f" x2="%.0f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", margin, y, margin+30, y, palette[i%len(palette)])
		n := 0
		if i < len(p.series) {
			n = len(p.series[i])
		}
		fmt.Fprintf(&b, `<text x="%.0f" y="%.1f" dominant-baseline="middle">%s (n=%d)</text>`+"\n", margin+40, y, html.EscapeString(l), n)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}
