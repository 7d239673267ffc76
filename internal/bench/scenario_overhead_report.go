package bench

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// The overhead scenario's tables: per request, per frame, memory per open stream, and the goals of
// issue #17 judged on ratios measured in the same run. Every figure is the median over the rounds,
// with the rounds' range where it says how noisy the figure was.

// spread is a figure over rounds.
type spread []float64

func (v spread) med() float64 {
	if len(v) == 0 {
		return math.NaN()
	}
	s := slices.Sorted(slices.Values(v))
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// fmtSpread renders "median (min–max)" with the given decimals; just the median for one round.
func (v spread) fmt(dec int) string {
	if len(v) == 0 || math.IsNaN(v.med()) {
		return "-"
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'f', dec, 64) }
	if len(v) == 1 {
		return f(v[0])
	}
	return fmt.Sprintf("%s (%s–%s)", f(v.med()), f(slices.Min(v)), f(slices.Max(v)))
}

// over returns a/b per round (rounds where either is missing are skipped).
func over(a, b spread) spread {
	var out spread
	for i := range min(len(a), len(b)) {
		if b[i] > 0 && a[i] >= 0 && !math.IsNaN(a[i]) && !math.IsNaN(b[i]) {
			out = append(out, a[i]/b[i])
		}
	}
	return out
}

func minus(a, b spread) spread {
	var out spread
	for i := range min(len(a), len(b)) {
		out = append(out, a[i]-b[i])
	}
	return out
}

// overheadCells holds the scenario's measurements: cells[load][target] has one cell a round.
type overheadCells map[string]map[string][]overheadCell

// get is a figure of a load on a target over the rounds; a negative figure (not measured) is NaN.
func (cs overheadCells) get(load, target string, f func(overheadCell) float64) spread {
	var v spread
	for _, c := range cs[load][target] {
		x := f(c)
		if x < 0 {
			x = math.NaN()
		}
		v = append(v, x)
	}
	return v
}

func cellCPU(c overheadCell) float64    { return c.cpuReq }
func cellP50(c overheadCell) float64    { return c.res.Summary.E2E.P50 }
func cellP99(c overheadCell) float64    { return c.res.Summary.E2E.P99 }
func cellTTFT50(c overheadCell) float64 { return c.res.Summary.TTFT.P50 }

// has says whether v was measured in some round.
func (v spread) has() bool { return len(v) > 0 && !math.IsNaN(v.med()) }

func (s *scenarioRun) overheadTables(p overheadParams, loads []overheadLoad, targets []*overheadTarget,
	cells map[string]map[string][]overheadCell, mem map[string]streamMemory) {
	cs := overheadCells(cells)
	s.res.Table = perRequestTable(loads, targets, cs)
	pf := s.perFrameTable(p, targets, cs)
	s.memoryTable(targets, mem)
	s.goalsTable(p, loads, cs, pf, mem)
	s.note("latency is end-to-end (JSON); added = target - direct in the same round; %d rounds, targets in rotating order", p.rounds)
	s.note("load generator, engines and proxies share the machine's %d CPUs", numCPU())
}

// perRequestTable is the result's main table: a row a load and target (JSON answers of 8 tokens, and
// the paired loads).
func perRequestTable(loads []overheadLoad, targets []*overheadTarget, cs overheadCells) [][]string {
	table := [][]string{{"load", "target", "req/s", "p50 ms", "p99 ms", "added p50 ms", "added p99 ms", "CPU µs/request", "failed"}}
	perRequest := []overheadLoad{loads[0], loads[1], loads[2], {name: pdPairedLoad, pd: true}, {name: spacedPairedLoad, regular: true}}
	for _, l := range perRequest {
		for _, t := range targets {
			cells := cs[l.name][t.name]
			if len(cells) == 0 {
				continue
			}
			failed := 0
			for _, c := range cells {
				failed += c.res.Summary.Failed + c.res.Summary.Dropped
			}
			row := []string{l.name, t.name, cs.get(l.name, t.name, func(c overheadCell) float64 { return c.res.Summary.RequestsPerSec }).fmt(0),
				cs.get(l.name, t.name, cellP50).fmt(3), cs.get(l.name, t.name, cellP99).fmt(3), "-", "-", "-", strconv.Itoa(failed)}
			if !t.pd && t.name != tDirect {
				row[5] = minus(cs.get(l.name, t.name, cellP50), cs.get(l.name, tDirect, cellP50)).fmt(3)
				row[6] = minus(cs.get(l.name, t.name, cellP99), cs.get(l.name, tDirect, cellP99)).fmt(3)
			}
			if v := cs.get(l.name, t.name, cellCPU); v.has() {
				row[7] = v.fmt(1)
			}
			table = append(table, row)
		}
	}
	return table
}

// perFrameTable writes the CPU a relayed frame costs each target, from two stream lengths at the
// same arrival rate, and returns it: target -> {spaced, back to back}.
func (s *scenarioRun) perFrameTable(p overheadParams, targets []*overheadTarget, cs overheadCells) map[string][2]spread {
	perFrame := func(prefix, target string) spread {
		a := cs.get(prefix+strconv.Itoa(p.n2), target, cellCPU)
		b := cs.get(prefix+strconv.Itoa(p.n1), target, cellCPU)
		var out spread
		for i := range min(len(a), len(b)) {
			out = append(out, (a[i]-b[i])/float64(p.n2-p.n1))
		}
		return out
	}
	pf := map[string][2]spread{}
	for _, t := range targets {
		if sp, bb := perFrame("spaced-", t.name), perFrame("b2b-", t.name); sp.has() || bb.has() {
			pf[t.name] = [2]spread{sp, bb}
		}
	}
	frames := [][]string{{"target", "µs/frame spaced", "vs reverseproxy", "vs nginx", "µs/frame back to back", "vs reverseproxy", "vs nginx"}}
	for _, t := range targets {
		v, ok := pf[t.name]
		if !ok {
			continue
		}
		row := []string{t.name, v[0].fmt(2), "-", "-", v[1].fmt(2), "-", "-"}
		if !t.pd {
			row[2], row[3] = over(v[0], pf[tRP][0]).fmt(2), over(v[0], pf[tNginx][0]).fmt(2)
			row[5], row[6] = over(v[1], pf[tRP][1]).fmt(2), over(v[1], pf[tNginx][1]).fmt(2)
		} else {
			row[5] = over(v[1], pf[tBarePD][1]).fmt(2) + " of bare-pd"
		}
		frames = append(frames, row)
	}
	s.section(fmt.Sprintf("Gateway CPU per relayed frame: (CPU per request at %d frames - at %d) / %d; spaced: %d µs apart at %.0f req/s; "+
		"back to back: in one write at %.0f req/s (PD: the decode engine writes each frame)", p.n2, p.n1, p.n2-p.n1, p.gapUS, p.spacedRate, p.b2bRat), frames)
	return pf
}

// memoryTable writes the memory a held stream costs each target and records sluice's in the result.
func (s *scenarioRun) memoryTable(targets []*overheadTarget, mem map[string]streamMemory) {
	mt := [][]string{{"target", "streams held", "RSS idle MiB", "RSS at half MiB", "RSS at all MiB", "KiB per stream (half -> all)"}}
	for _, t := range targets {
		m, ok := mem[t.name]
		if !ok {
			continue
		}
		if !m.measured {
			mt = append(mt, []string{t.name, strconv.Itoa(m.streams), "-", "-", "-", "-"})
			continue
		}
		mib := func(b int64) string { return strconv.FormatFloat(float64(b)/(1<<20), 'f', 1, 64) }
		mt = append(mt, []string{t.name, strconv.Itoa(m.streams), mib(m.rssIdle), mib(m.rssHalf), mib(m.rssFull),
			strconv.FormatFloat(m.perStream()/1024, 'f', 1, 64)})
		s.res.Measurements[t.name+"_rss_bytes_per_stream"] = round3(m.perStream())
	}
	s.section("Memory per open stream: streams held open at once (first frame received), proxy resident memory (VmRSS, "+
		"all its processes) read from /proc; kernel socket buffers are not in it", mt)
}

// goalsTable judges the issues' goals, each a ratio or a difference measured in this run.
func (s *scenarioRun) goalsTable(p overheadParams, loads []overheadLoad, cs overheadCells, pf map[string][2]spread, mem map[string]streamMemory) {
	type goal struct {
		name, target string
		v            spread
		ok           func(float64) bool
		dec          int
	}
	le := func(x float64) func(float64) bool { return func(v float64) bool { return v <= x } }
	ratio := func(load, a, b string) spread { return over(cs.get(load, a, cellCPU), cs.get(load, b, cellCPU)) }
	goals := []goal{
		{"frame spaced like tokens: sluice / reverseproxy", "<= 1.0", over(pf[tSluice][0], pf[tRP][0]), le(1.0), 2},
		{"frame spaced like tokens: sluice / nginx", "<= 1.2", over(pf[tSluice][0], pf[tNginx][0]), le(1.2), 2},
		{"frames back to back: sluice / reverseproxy", "<= 1.2", over(pf[tSluice][1], pf[tRP][1]), le(1.2), 2},
		{"PD JSON CPU per request, open loop at " + strconv.Itoa(int(p.pdRate)) + " req/s: sluice-pd / bare-pd", "<= 1.0",
			ratio(loads[1].name, tPD, tBarePD), le(1.0), 2},
		{"PD JSON CPU per request, closed loop: sluice-pd / bare-pd", "<= 1.0", ratio(loads[2].name, tPD, tBarePD), le(1.0), 2},
		{"PD JSON CPU per request, both loaded at once (closed loop): sluice-pd / bare-pd (issue #33)", "<= 1.02",
			ratio(pdPairedLoad, tPD, tBarePD), le(1.02), 3},
		{"stream of " + strconv.Itoa(p.n2) + " frames spaced like tokens, CPU per stream, both loaded at once: sluice / reverseproxy (issue #33)", "<= 1.02",
			ratio(spacedPairedLoad, tSluice, tRP), le(1.02), 3},
		{"PD JSON CPU per request, open loop: sluice-pd-seats / sluice-pd (issue #21)", "<= 1.05",
			ratio(loads[1].name, tPDSeats, tPD), le(1.05), 2},
		{"PD JSON CPU per request, open loop: sluice-pd-grpc / sluice-pd (issue #35)", "<= 1.3",
			ratio(loads[1].name, tPDGRPC, tPD), le(1.3), 2},
		{"PD stream of " + strconv.Itoa(p.n2) + " tokens CPU per request: sluice-pd-grpc / sluice-pd (issue #35)", "<= 1.3",
			ratio(loads[6].name, tPDGRPC, tPD), le(1.3), 2},
		{"PD stream of " + strconv.Itoa(p.n2) + " tokens, added TTFT p50: sluice-pd-grpc - sluice-pd (ms)", "<= 0",
			minus(cs.get(loads[6].name, tPDGRPC, cellTTFT50), cs.get(loads[6].name, tPD, cellTTFT50)), le(0), 3},
		{"added p50 at " + strconv.Itoa(int(p.rate)) + " req/s: sluice - nginx (ms)", "<= 0.100",
			minus(cs.get(loads[0].name, tSluice, cellP50), cs.get(loads[0].name, tNginx, cellP50)), le(0.1), 3},
		{"added p99 at " + strconv.Itoa(int(p.rate)) + " req/s: sluice - nginx (ms)", "<= 1.000",
			minus(cs.get(loads[0].name, tSluice, cellP99), cs.get(loads[0].name, tNginx, cellP99)), le(1.0), 3},
	}
	gt := [][]string{{"goal", "target", "measured: median (range over rounds)", "met"}}
	for _, g := range goals {
		met := "-"
		if g.v.has() {
			met = map[bool]string{true: "yes", false: "no"}[g.ok(g.v.med())]
		}
		gt = append(gt, []string{g.name, g.target, g.v.fmt(g.dec), met})
	}
	if m, ok := mem[tSluice]; ok && m.measured {
		kib := m.perStream() / 1024
		gt = append(gt, []string{"gateway memory per open stream (KiB)", "<= 64", strconv.FormatFloat(kib, 'f', 1, 64),
			map[bool]string{true: "yes", false: "no"}[kib <= 64]})
	}
	s.section("Goals (issues #17, #21, #33, #35)", gt)
}
