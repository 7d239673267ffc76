package telemetry_test

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sluicegw/sluice/internal/kvevents"
	"github.com/sluicegw/sluice/internal/telemetry"
)

func TestKVEventsMetrics(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := telemetry.NewKVEventsMetrics(reg)
	idx, err := kvevents.NewIndex(kvevents.IndexConfig{Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	const w = "http://e:8000"
	idx.Apply(w, 1, &kvevents.Batch{Events: []kvevents.Event{
		{Kind: kvevents.BlockStored, BlockSize: 2, TokenIDs: []uint32{1, 2, 3, 4},
			BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1), kvevents.IntHash(2)}},
		{Kind: kvevents.BlockStored, BlockSize: 2, TokenIDs: []uint32{1, 2}, BlockHashes: []kvevents.EngineHash{kvevents.IntHash(9)},
			Parent: kvevents.IntHash(77), HasParent: true},
		{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.EngineHash{kvevents.IntHash(2)}},
	}})
	m.IncGap(w, true)
	m.IncCleared(w, "gap")
	m.IncMalformed(w)
	m.ObserveLag(w, 3*time.Millisecond)
	want := `
# HELP sluice_kv_index_blocks KV-cache blocks indexed for a worker's data-parallel rank, from the engine's KV events.
# TYPE sluice_kv_index_blocks gauge
sluice_kv_index_blocks{rank="1",worker="http://e:8000"} 1
# HELP sluice_kv_events_total KV-cache events applied to the index, by kind (BlockStored, BlockRemoved, AllBlocksCleared).
# TYPE sluice_kv_events_total counter
sluice_kv_events_total{kind="BlockRemoved",worker="http://e:8000"} 1
sluice_kv_events_total{kind="BlockStored",worker="http://e:8000"} 2
# HELP sluice_kv_index_dropped_blocks_total Stored blocks not indexed, by reason (full, orphan, block_size, lora).
# TYPE sluice_kv_index_dropped_blocks_total counter
sluice_kv_index_dropped_blocks_total{reason="orphan",worker="http://e:8000"} 1
# HELP sluice_kv_events_gaps_total Sequence gaps in a worker's KV event stream, repaired through the replay socket or not.
# TYPE sluice_kv_events_gaps_total counter
sluice_kv_events_gaps_total{repaired="true",worker="http://e:8000"} 1
# HELP sluice_kv_index_clears_total Times the gateway cleared a worker's block index, by reason (gap: unrepaired; restart: new engine process).
# TYPE sluice_kv_index_clears_total counter
sluice_kv_index_clears_total{reason="gap",worker="http://e:8000"} 1
# HELP sluice_kv_events_malformed_total KV event frames dropped as undecodable.
# TYPE sluice_kv_events_malformed_total counter
sluice_kv_events_malformed_total{worker="http://e:8000"} 1
`
	names := []string{"sluice_kv_index_blocks", "sluice_kv_events_total", "sluice_kv_index_dropped_blocks_total",
		"sluice_kv_events_gaps_total", "sluice_kv_index_clears_total", "sluice_kv_events_malformed_total"}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), names...); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "sluice_kv_events_lag_seconds"); n != 1 {
		t.Errorf("lag series: %d, want 1", n)
	}
	idx.RemoveWorker(w)
	if n, err := testutil.GatherAndCount(reg); err != nil || n != 0 {
		t.Errorf("after RemoveWorker: %d series (%v), want none", n, err)
	}
}
