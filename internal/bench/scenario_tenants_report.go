package bench

import (
	"slices"
	"time"
)

// tenantRow is one tenant's figures in one variant of the tenants scenario.
type tenantRow struct {
	name        string
	offered     float64 // requests per second of the measured window
	sum         Summary
	records     []Record
	servedShare float64 // of everything the run served
	fairShare   float64 // max-min fair share of that, from the offered rates
}

// tenantRows splits a run by tenant (its class) and sets each tenant's served and fair shares. The
// offered rate is over the arrival window dur; the served rate over the run's window, which also
// holds the drain of the requests in flight at its end.
func tenantRows(res *Result, classes []ClassConfig, dur, slo time.Duration) []tenantRow {
	window := dur.Seconds()
	rows := make([]tenantRow, 0, len(classes))
	served := 0.0
	for _, c := range classes {
		sum := classSummary(res, c.Name, slo)
		r := tenantRow{name: c.Name, sum: sum, records: classRecords(res, c.Name)}
		if window > 0 {
			r.offered = float64(sum.Requests) / window
		}
		served += sum.RequestsPerSec
		rows = append(rows, r)
	}
	if served <= 0 {
		return rows
	}
	demand := make([]float64, len(rows))
	for i, r := range rows {
		demand[i] = r.offered
	}
	fair := maxMinFair(served, demand)
	for i := range rows {
		rows[i].servedShare = rows[i].sum.RequestsPerSec / served
		rows[i].fairShare = fair[i] / served
	}
	return rows
}

// maxMinFair is the max-min fair allocation of capacity to demands (water-filling): every demand
// below an equal split of what is left is met whole, the rest share the remainder equally.
func maxMinFair(capacity float64, demand []float64) []float64 {
	alloc := make([]float64, len(demand))
	order := make([]int, len(demand))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		switch {
		case demand[a] < demand[b]:
			return -1
		case demand[a] > demand[b]:
			return 1
		}
		return 0
	})
	left := capacity
	for k, i := range order {
		share := left / float64(len(order)-k)
		alloc[i] = min(demand[i], share)
		left -= alloc[i]
	}
	return alloc
}
