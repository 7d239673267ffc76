package sim

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSGLangPDRanks drives an SGLang prefill with 4 DP ranks and a decode with 2, sending the two legs
// as a gateway does, with consistent, missing and wrong rank hints.
func TestSGLangPDRanks(t *testing.T) {
	t.Parallel()
	base := Config{Mode: ModeInstant, Seed: 5, BootstrapTimeout: 300 * time.Millisecond}
	pcfg, dcfg := base, base
	pcfg.Role, pcfg.DPSize = RolePrefill, 4
	dcfg.Role, dcfg.DPSize = RoleDecode, 2
	p, d := startEngine(t, pcfg), startEngine(t, dcfg)
	bp := p.BootstrapPort()
	c := testClient(t)
	const chat = `{"model":"sim-model","messages":[{"role":"user","content":"which rank holds my kv"}],"max_tokens":4}`
	url := func(e *Engine) string { return e.URL() + "/v1/chat/completions" }
	// legs builds the two bodies: the room, then extra fields of each leg (raw JSON pairs).
	legs := func(room uint64, prefillExtra, decodeExtra []string) (string, string) {
		b := withBootstrap(chat, "127.0.0.1", bp, room)
		return withFields(b, prefillExtra...), withFields(b, decodeExtra...)
	}
	reset := func() { p.ResetStats(); d.ResetStats() }

	t.Run("consistent hints", func(t *testing.T) {
		reset()
		// Room 4k+1 would follow rank 1; the hints put the prefill on rank 3 and the decode on rank 1.
		pb, db := legs(401, []string{"routed_dp_rank", "3", "disagg_prefill_dp_rank", "3"},
			[]string{"routed_dp_rank", "1", "disagg_prefill_dp_rank", "3"})
		pr, dr := sendBoth(t, c, url(p), pb, url(d), db)
		if pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		if got := rankRequests(p); !onlyRank(got, 3) {
			t.Errorf("prefill ranks %v, want rank 3", got)
		}
		if got := rankRequests(d); !onlyRank(got, 1) {
			t.Errorf("decode ranks %v, want rank 1", got)
		}
	})

	t.Run("no hints: both follow the room", func(t *testing.T) {
		reset()
		pb, db := legs(4*1000+2, nil, nil)
		pr, dr := sendBoth(t, c, url(p), pb, url(d), db)
		if pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
		if got := rankRequests(p); !onlyRank(got, 2) {
			t.Errorf("prefill ranks %v, want rank 2 (room %% 4)", got)
		}
	})

	t.Run("prefill rank hint on the room's rank needs no decode hint", func(t *testing.T) {
		reset()
		pb, db := legs(7, []string{"routed_dp_rank", "3"}, nil)
		if pr, dr := sendBoth(t, c, url(p), pb, url(d), db); pr.status != 200 || dr.status != 200 {
			t.Fatalf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
	})

	t.Run("prefill off its room's rank without disagg_prefill_dp_rank", func(t *testing.T) {
		reset()
		// The prefill body has routed_dp_rank only (the decode is told the rank): follow_bootstrap_room
		// conflict on the prefill, and the decode waits for KV that never comes.
		pb, db := legs(8, []string{"routed_dp_rank", "1"}, []string{"disagg_prefill_dp_rank", "1"})
		pr, dr := sendBoth(t, c, url(p), pb, url(d), db)
		want := "Prefill bootstrap failed for request rank=1 req.rid='"
		if eb := decodeJSON[sglangErr](t, pr.body); pr.status != 500 || !strings.HasPrefix(eb.Message, want) ||
			!strings.HasSuffix(eb.Message, "with exception KVTransferError(bootstrap_room=8): follow_bootstrap_room conflict: dispatched to dp_rank 1 "+
				"but bootstrap_room 8 implies dp_rank 0. Set SGLANG_DISAGGREGATION_FORCE_QUERY_PREFILL_DP_RANK=1 to allow mixed routing.") {
			t.Errorf("prefill %d %s", pr.status, pr.body)
		}
		if eb := decodeJSON[sglangErr](t, dr.body); dr.status != 500 || !strings.Contains(eb.Message, "timed out after 0.3s in KVPoll.WaitingForInput") {
			t.Errorf("decode %d %s", dr.status, dr.body)
		}
		if p.Stats().RankConflicts != 1 || d.Stats().BootstrapTimeouts != 1 {
			t.Errorf("prefill conflicts %d, decode timeouts %d", p.Stats().RankConflicts, d.Stats().BootstrapTimeouts)
		}
	})

	t.Run("decode looks at the wrong prefill rank", func(t *testing.T) {
		reset()
		// The prefill runs on rank 1 (no conflict: it carries disagg_prefill_dp_rank); the decode is told
		// rank 2. Neither meets the other: both time out.
		pb, db := legs(9, []string{"routed_dp_rank", "1", "disagg_prefill_dp_rank", "1"}, []string{"disagg_prefill_dp_rank", "2"})
		pr, dr := sendBoth(t, c, url(p), pb, url(d), db)
		if eb := decodeJSON[sglangErr](t, pr.body); pr.status != 500 || !strings.Contains(eb.Message, "Request 9 timed out after 0.3s in KVPoll.Bootstrapping") {
			t.Errorf("prefill %d %s", pr.status, pr.body)
		}
		if eb := decodeJSON[sglangErr](t, dr.body); dr.status != 500 || !strings.Contains(eb.Message, "Request 9 timed out after 0.3s in KVPoll.WaitingForInput") {
			t.Errorf("decode %d %s", dr.status, dr.body)
		}
		if p.Stats().HandshakeTimeouts != 1 || d.Stats().BootstrapTimeouts != 1 {
			t.Errorf("prefill handshake timeouts %d, decode bootstrap timeouts %d", p.Stats().HandshakeTimeouts, d.Stats().BootstrapTimeouts)
		}
	})

	t.Run("a gateway that ignores the decode hint", func(t *testing.T) {
		reset()
		// Prefill pinned to rank 0 consistently, decode given no hint: it assumes room % 4 = 3.
		pb, db := legs(11, []string{"routed_dp_rank", "0", "disagg_prefill_dp_rank", "0"}, nil)
		pr, dr := sendBoth(t, c, url(p), pb, url(d), db)
		if pr.status != 500 || dr.status != 500 || d.Stats().BootstrapTimeouts != 1 {
			t.Errorf("prefill %d %s, decode %d %s", pr.status, pr.body, dr.status, dr.body)
		}
	})

	t.Run("prefill rank the prefill does not have", func(t *testing.T) {
		reset()
		_, db := legs(12, nil, []string{"disagg_prefill_dp_rank", "7", "routed_dp_rank", "0"})
		status, body := post(t, c, url(d), db)
		want := "Decode handshake failed for request rank=0 decode_req.req.rid='"
		if eb := decodeJSON[sglangErr](t, body); status != 500 || !strings.HasPrefix(eb.Message, want) || !strings.HasSuffix(eb.Message,
			"with exception KVTransferError(bootstrap_room=12): Could not fetch bootstrap info for: prefill_dp_rank: 7 prefill_cp_rank: 0 target_tp_rank: 0 and target_pp_rank 0") {
			t.Errorf("decode %d %s", status, body)
		}
		if st := d.Stats(); st.PrefillRankMisses != 1 || st.BootstrapTimeouts != 0 {
			t.Errorf("decode stats: misses %d, timeouts %d", st.PrefillRankMisses, st.BootstrapTimeouts)
		}
	})

	t.Run("out-of-range routed_dp_rank on the decode", func(t *testing.T) {
		_, db := legs(13, nil, []string{"routed_dp_rank", "2"})
		status, body := post(t, c, url(d), db)
		if eb := decodeJSON[sglangErr](t, body); status != 400 || eb.Message != "routed_dp_rank=2 out of range [0, 2)" {
			t.Errorf("decode %d %s", status, body)
		}
	})
}

func TestSGLangBootstrapRoutes(t *testing.T) {
	t.Parallel()
	p := startEngine(t, Config{Role: RolePrefill, Mode: ModeInstant, DPSize: 4, BlockSize: 32})
	c := testClient(t)
	boot := "http://127.0.0.1:" + strconv.Itoa(p.BootstrapPort())
	status, body := get(t, c, boot+"/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1")
	info := decodeJSON[map[string]any](t, body)
	if status != 200 || info["dp_size"] != float64(4) || info["follow_bootstrap_room"] != true || info["attn_tp_size"] != float64(1) ||
		info["page_size"] != float64(32) || info["prefill_http_port"] != float64(p.Port()) || info["target_tp_rank"] != nil {
		t.Errorf("server info %d %s", status, body)
	}
	status, body = get(t, c, boot+"/route?prefill_dp_rank=3&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0")
	if ri := decodeJSON[map[string]any](t, body); status != 200 || ri["rank_ip"] != "127.0.0.1" || ri["rank_port"] != float64(p.BootstrapPort()) {
		t.Errorf("rank 3: %d %s", status, body)
	}
	if status, body = get(t, c, boot+"/route?prefill_dp_rank=4&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"); status != 404 ||
		string(body) != "Bootstrap info not found for dp_rank=4 cp_rank=0 tp_rank=0 pp_rank=0" {
		t.Errorf("rank 4: %d %s", status, body)
	}
	if status, body = get(t, c, boot+"/route?prefill_dp_rank=1"); status != 400 || string(body) != "Missing inputs for bootstrap server." {
		t.Errorf("missing inputs: %d %s", status, body)
	}
	if status, body = get(t, c, boot+"/health"); status != 200 || string(body) != "OK" {
		t.Errorf("health: %d %s", status, body)
	}
}
