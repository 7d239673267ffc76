package sim

import (
	"bytes"
	"container/list"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// SGLang-style rendezvous. A decode engine connects to the prefill engine's bootstrap server for its
// room on one prefill DP rank (the handshake) and waits there for the room's KV. The prefill engine does
// not start a request until the decode has connected for its room on the rank the request runs on
// (python/sglang/srt/disaggregation/prefill.py PrefillBootstrapQueue.pop_bootstrapped skips requests
// whose sender still polls KVPoll.Bootstrapping), and gives up after its bootstrap timeout. A room
// serves one pair: a second request on the same room never completes its handshake and times out (the
// n > 1 bug: every sample of a prompt shares the prompt's room). A decode that looks for the room on
// another rank than the prefill's never meets it: both time out.

// errRoomCollision: a second request uses a room another request on this engine already holds.
var errRoomCollision = errors.New("bootstrap room already in use")

// rendezvous is a prefill engine's bootstrap state per room: whether a decode has connected, and the
// KV record once the prefill has computed it. A room lives while someone waits on it; a published
// record nobody took expires after ttl, and at most maxRooms records are kept.
type rendezvous struct {
	mu        sync.Mutex
	ttl       time.Duration
	maxRooms  int
	rooms     map[uint64]*room
	published list.List // of *room holding a record nobody took, oldest first
	expired   int64
}

type room struct {
	key            uint64
	connected      chan struct{} // closed when a decode connects
	isConnected    bool
	decodeWaiting  bool
	prefillWaiters int
	ready          chan struct{} // closed when the record is published
	isPub          bool
	rec            kvRecord
	at             time.Time
	pubElem        *list.Element
}

func newRendezvous(ttl time.Duration, maxRooms int) *rendezvous {
	return &rendezvous{ttl: ttl, maxRooms: maxRooms, rooms: make(map[uint64]*room)}
}

func (z *rendezvous) roomLocked(key uint64) *room {
	r, ok := z.rooms[key]
	if !ok {
		r = &room{key: key, connected: make(chan struct{}), ready: make(chan struct{})}
		z.rooms[key] = r
	}
	return r
}

// releaseLocked forgets a room nobody waits on and that holds no record.
func (z *rendezvous) releaseLocked(r *room) {
	if !r.decodeWaiting && r.prefillWaiters == 0 && !r.isPub && z.rooms[r.key] == r {
		delete(z.rooms, r.key)
	}
}

func (z *rendezvous) dropLocked(r *room) {
	if r.pubElem != nil {
		z.published.Remove(r.pubElem)
		r.pubElem = nil
	}
	if z.rooms[r.key] == r {
		delete(z.rooms, r.key)
	}
}

func (z *rendezvous) sweepLocked(now time.Time) {
	for f := z.published.Front(); f != nil && now.Sub(f.Value.(*room).at) >= z.ttl; f = z.published.Front() {
		z.dropLocked(f.Value.(*room))
		z.expired++
	}
}

// connect is the decode side: it completes the room's handshake and waits for its record. A room
// another decode is already waiting on is a collision.
func (z *rendezvous) connect(ctx context.Context, key uint64) (kvRecord, error) {
	z.mu.Lock()
	r := z.roomLocked(key)
	if r.decodeWaiting {
		z.mu.Unlock()
		return kvRecord{}, errRoomCollision
	}
	r.decodeWaiting = true
	if !r.isConnected {
		r.isConnected = true
		close(r.connected)
	}
	z.mu.Unlock()
	select {
	case <-r.ready:
		z.mu.Lock()
		defer z.mu.Unlock()
		r.decodeWaiting = false
		z.dropLocked(r)
		return r.rec, nil
	case <-ctx.Done():
		z.mu.Lock()
		defer z.mu.Unlock()
		r.decodeWaiting = false
		z.releaseLocked(r)
		return kvRecord{}, ctx.Err()
	}
}

// awaitConnect is the prefill side: it returns once a decode has connected for the room.
func (z *rendezvous) awaitConnect(ctx context.Context, key uint64) error {
	z.mu.Lock()
	r := z.roomLocked(key)
	if r.isConnected {
		z.mu.Unlock()
		return nil
	}
	r.prefillWaiters++
	z.mu.Unlock()
	select {
	case <-r.connected:
		z.mu.Lock()
		r.prefillWaiters--
		z.mu.Unlock()
		return nil
	case <-ctx.Done():
		z.mu.Lock()
		defer z.mu.Unlock()
		r.prefillWaiters--
		z.releaseLocked(r)
		return ctx.Err()
	}
}

// publish stores the room's record for its decode; publishing twice replaces the record.
func (z *rendezvous) publish(key uint64, rec kvRecord) {
	now := time.Now()
	z.mu.Lock()
	defer z.mu.Unlock()
	z.sweepLocked(now)
	r := z.roomLocked(key)
	r.rec, r.at = rec, now
	if r.isPub {
		z.published.MoveToBack(r.pubElem)
		return
	}
	r.isPub = true
	r.pubElem = z.published.PushBack(r)
	close(r.ready)
	for z.published.Len() > z.maxRooms {
		z.dropLocked(z.published.Front().Value.(*room))
		z.expired++
	}
}

// size is the number of published records nobody took yet.
func (z *rendezvous) size() int {
	z.mu.Lock()
	defer z.mu.Unlock()
	return z.published.Len()
}

// roomClaims are the rooms this engine's in-flight samples hold: SGLang keys its transfer state by
// room, so a second sample on a held room collides whichever request it belongs to.
type roomClaims struct {
	mu   sync.Mutex
	held map[uint64]int
}

// claim holds the room for one sample and reports whether it is the room's only holder.
func (c *roomClaims) claim(room uint64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held == nil {
		c.held = make(map[uint64]int)
	}
	c.held[room]++
	return c.held[room] == 1
}

func (c *roomClaims) release(room uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held[room]--; c.held[room] <= 0 {
		delete(c.held, room)
	}
}

// The messages SGLang aborts a failed rendezvous with (disaggregation/prefill.py pop_bootstrapped,
// decode.py pop_preallocated and pop_transferred; the timeout text is common/conn.py
// _check_bootstrap_timeout / _check_waiting_timeout). rank is the scheduler's TP rank: with one
// attention-TP rank per DP rank it is the DP rank.
func (e *Engine) prefillBootstrapFailed(sp *sampleSpec, why string) error {
	return abortError(errBootstrapTimeout, http.StatusInternalServerError,
		"Prefill bootstrap failed for request rank=%d req.rid='%s' req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): %s",
		sp.rank, sp.rid, sp.hs.room, sp.hs.room, why)
}

func (e *Engine) decodeHandshakeFailed(sp *sampleSpec, why string) error {
	return abortError(errKVTransfer, http.StatusInternalServerError,
		"Decode handshake failed for request rank=%d decode_req.req.rid='%s' decode_req.req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): %s",
		sp.rank, sp.rid, sp.hs.room, sp.hs.room, why)
}

func (e *Engine) decodeTransferFailed(kind error, sp *sampleSpec, why string) error {
	return abortError(kind, http.StatusInternalServerError,
		"Decode transfer failed for request rank=%d decode_req.req.rid='%s' decode_req.req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): %s",
		sp.rank, sp.rid, sp.hs.room, sp.hs.room, why)
}

func (e *Engine) timedOutIn(sp *sampleSpec, state string) string {
	return fmt.Sprintf("Request %d timed out after %.1fs in KVPoll.%s", sp.hs.room, e.cfg.BootstrapTimeout.Seconds(), state)
}

// collide holds a sample whose room another sample on this rank holds until the bootstrap timeout:
// its handshake never completes.
func (e *Engine) collide(ctx context.Context, sp *sampleSpec) error {
	e.stats.roomCollisions.Add(1)
	if err := sleepCtx(ctx, e.cfg.BootstrapTimeout); err != nil {
		return err
	}
	if sp.phase == phasePrefill {
		e.stats.handshakeTimeouts.Add(1)
		return e.prefillBootstrapFailed(sp, e.timedOutIn(sp, "Bootstrapping"))
	}
	e.stats.bootstrapTimeouts.Add(1)
	e.metrics.bootstrapTimeouts.Inc()
	return e.decodeTransferFailed(errBootstrapTimeout, sp, e.timedOutIn(sp, "WaitingForInput"))
}

// awaitDecode is the prefill side of the handshake: wait until the decode engine has connected for
// the sample's room on the sample's rank, up to the bootstrap timeout.
func (e *Engine) awaitDecode(ctx context.Context, sp *sampleSpec) error {
	rooms := e.ranks[sp.rank].rooms
	if rooms == nil {
		return abortError(errKVTransfer, http.StatusInternalServerError, "this engine has no bootstrap server (role %s, protocol %s)", e.cfg.Role, e.cfg.Protocol)
	}
	e.stats.handshakeWaits.Add(1)
	e.stats.handshakeWaiting.Add(1)
	defer e.stats.handshakeWaiting.Add(-1)
	e.ranks[sp.rank].bootstrapping.Add(1)
	defer e.ranks[sp.rank].bootstrapping.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, e.cfg.BootstrapTimeout)
	defer cancel()
	err := rooms.awaitConnect(wctx, sp.hs.room)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	e.stats.handshakeTimeouts.Add(1)
	return e.prefillBootstrapFailed(sp, e.timedOutIn(sp, "Bootstrapping"))
}

// prefillServerInfo is what an SGLang prefill's bootstrap server answers GET /route with all ranks -1:
// disaggregation/common/conn.py PrefillServerInfo, serialised with dataclasses.asdict.
type prefillServerInfo struct {
	AttnTPSize                 int     `json:"attn_tp_size"`
	AttnCPSize                 int     `json:"attn_cp_size"`
	DPSize                     int     `json:"dp_size"`
	PPSize                     int     `json:"pp_size"`
	PageSize                   *int    `json:"page_size"`
	KVCacheDtype               *string `json:"kv_cache_dtype"`
	FollowBootstrapRoom        bool    `json:"follow_bootstrap_room"`
	EnableDSACacheLayerSplit   bool    `json:"enable_dsa_cache_layer_split"`
	PrefillHTTPPort            *int    `json:"prefill_http_port"`
	TargetTPRank               *int    `json:"target_tp_rank"`
	TargetTPRanks              []int   `json:"target_tp_ranks"`
	TargetCPRanks              []int   `json:"target_cp_ranks"`
	TargetPPRanks              []int   `json:"target_pp_ranks"`
	RequiredDstInfoNum         *int    `json:"required_dst_info_num"`
	RequiredPrefillResponseNum *int    `json:"required_prefill_response_num"`
}

// prefillRankInfo is GET /route for one rank: common/conn.py PrefillRankInfo. The real rank_port is the
// rank's ZMQ port; the simulator's ranks share the bootstrap listener.
type prefillRankInfo struct {
	RankIP   string `json:"rank_ip"`
	RankPort int    `json:"rank_port"`
}

func (e *Engine) serverInfoForDecodes() prefillServerInfo {
	page, dtype, port := e.cfg.BlockSize, "auto", e.Port()
	return prefillServerInfo{AttnTPSize: 1, AttnCPSize: 1, DPSize: len(e.ranks), PPSize: 1, PageSize: &page,
		KVCacheDtype: &dtype, FollowBootstrapRoom: true, PrefillHTTPPort: &port}
}

// prefillInfos caches, per bootstrap address, the prefill's server info and the ranks already looked up
// (CommonKVManager.prefill_info_table and connection_pool).
type prefillInfos struct {
	mu     sync.Mutex
	byAddr map[string]*prefillInfoEntry
}

type prefillInfoEntry struct {
	info  prefillServerInfo
	ranks map[int]bool
}

func (p *prefillInfos) get(addr string) (prefillServerInfo, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	ent, ok := p.byAddr[addr]
	if !ok {
		return prefillServerInfo{}, false
	}
	return ent.info, true
}

func (p *prefillInfos) set(addr string, info prefillServerInfo) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.byAddr == nil {
		p.byAddr = make(map[string]*prefillInfoEntry)
	}
	p.byAddr[addr] = &prefillInfoEntry{info: info, ranks: make(map[int]bool)}
}

func (p *prefillInfos) knowsRank(addr string, rank int) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	ent, ok := p.byAddr[addr]
	return ok && ent.ranks[rank]
}

func (p *prefillInfos) addRank(addr string, rank int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ent, ok := p.byAddr[addr]; ok {
		ent.ranks[rank] = true
	}
}

func (p *prefillInfos) forget(addr string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.byAddr, addr)
}

// bootstrapGet GETs a path on a bootstrap server and returns the status and body.
func (e *Engine) bootstrapGet(ctx context.Context, addr, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second) // requests.get(url, timeout=5)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := e.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	return resp.StatusCode, body, err
}

// routeQuery is GET /route's query for one prefill rank (cp, tp and pp rank 0 here).
func routeQuery(dpRank int) string {
	return "/route?prefill_dp_rank=" + strconv.Itoa(dpRank) + "&prefill_cp_rank=0&target_tp_rank=0&target_pp_rank=0"
}

// resolvePrefillRank finds the prefill DP rank that holds a decode sample's KV, as SGLang's decode does
// (disaggregation/decode.py DecodePreallocQueue._resolve_prefill_dp_rank): first the prefill's server
// info from its bootstrap server (CommonKVManager.try_ensure_parallel_info, cached per address), then
// disagg_prefill_dp_rank if the request has one, else 0 for a prefill without DP, else
// bootstrap_room % the prefill's dp_size (the prefill follows rooms). The rank is then looked up on the
// bootstrap server (GET /route, cached like connection_pool): a rank it does not have fails the handshake.
func (e *Engine) resolvePrefillRank(ctx context.Context, sp *sampleSpec, addr string) (int, error) {
	unreachable := func(detail error) error {
		e.prefillInfos.forget(addr)
		return e.decodeTransferFailed(errKVTransfer, sp, fmt.Sprintf("Failed to get prefill server info from bootstrap server %s: %v", addr, detail))
	}
	info, ok := e.prefillInfos.get(addr)
	if !ok {
		status, body, err := e.bootstrapGet(ctx, addr, "/route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1")
		if err != nil {
			if ctx.Err() != nil {
				return 0, ctx.Err()
			}
			return 0, unreachable(err)
		}
		if status != http.StatusOK {
			return 0, unreachable(fmt.Errorf("status %d: %s", status, bytes.TrimSpace(body)))
		}
		if err := json.Unmarshal(body, &info); err != nil || info.DPSize < 1 {
			return 0, unreachable(fmt.Errorf("bad prefill server info %s", bytes.TrimSpace(body)))
		}
		e.prefillInfos.set(addr, info)
	}
	var rank int
	switch {
	case sp.hs.prefillRank != nil:
		rank = *sp.hs.prefillRank
	case info.DPSize == 1:
		rank = 0
	case info.FollowBootstrapRoom:
		rank = int(sp.hs.room % uint64(info.DPSize))
	default:
		// A prefill that does not follow rooms registers each room's rank for a decode to query
		// (/register_dp_rank, /query_dp_ranks): the simulator's prefills always follow rooms.
		return 0, unreachable(errors.New("the prefill does not follow bootstrap rooms and its rank query is not simulated"))
	}
	if e.prefillInfos.knowsRank(addr, rank) {
		return rank, nil
	}
	status, body, err := e.bootstrapGet(ctx, addr, routeQuery(rank))
	switch {
	case err != nil && ctx.Err() != nil:
		return 0, ctx.Err()
	case err != nil:
		return 0, unreachable(err)
	case status == http.StatusOK:
		e.prefillInfos.addRank(addr, rank)
		return rank, nil
	default:
		e.logger.Info("Failed to get prefill server info", "status", status, "body", string(bytes.TrimSpace(body)))
		e.stats.prefillRankMisses.Add(1)
		return 0, e.decodeHandshakeFailed(sp, fmt.Sprintf("Could not fetch bootstrap info for: prefill_dp_rank: %d prefill_cp_rank: 0 target_tp_rank: 0 and target_pp_rank 0", rank))
	}
}

// waitRoom is the decode side: find the prefill rank holding the room, connect to the prefill's
// bootstrap server for the room on that rank and long-poll for its KV record, up to the bootstrap
// timeout.
func (e *Engine) waitRoom(ctx context.Context, sp *sampleSpec) (kvRecord, error) {
	e.stats.bootstrapWaits.Add(1)
	e.stats.bootstrapWaiting.Add(1)
	defer e.stats.bootstrapWaiting.Add(-1)
	addr := net.JoinHostPort(sp.hs.host, strconv.Itoa(sp.hs.port))
	unreachable := func(detail error) error {
		e.prefillInfos.forget(addr)
		return e.decodeTransferFailed(errKVTransfer, sp, fmt.Sprintf("Failed to get prefill server info from bootstrap server %s: %v", addr, detail))
	}
	if sp.hs.host == "" {
		return kvRecord{}, unreachable(errors.New("bootstrap_host is missing"))
	}
	// The waiting timeout runs from the handshake: pre-allocation and the KV's arrival share it.
	deadline := time.Now().Add(e.cfg.BootstrapTimeout)
	ctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second)) // the server answers 408 first
	defer cancel()
	timedOut := func() error {
		e.stats.bootstrapTimeouts.Add(1)
		e.metrics.bootstrapTimeouts.Inc()
		return e.decodeTransferFailed(errBootstrapTimeout, sp, e.timedOutIn(sp, "WaitingForInput"))
	}
	prank, err := e.resolvePrefillRank(ctx, sp, addr)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) {
			return kvRecord{}, timedOut()
		}
		return kvRecord{}, err
	}
	if e.cfg.preallocates() {
		// Only a pre-allocated decode sends the prefill its destination (decode.go).
		if err := e.preallocateDecode(ctx, sp, deadline, timedOut); err != nil {
			return kvRecord{}, err
		}
		r := e.ranks[sp.rank]
		r.transferring.Add(1)
		defer r.transferring.Add(-1)
	}
	left := time.Until(deadline)
	if left <= 0 {
		return kvRecord{}, timedOut()
	}
	u := "http://" + addr + "/room/" + strconv.FormatUint(sp.hs.room, 10) +
		"?dp_rank=" + strconv.Itoa(prank) + "&timeout_ms=" + strconv.FormatInt(max(left.Milliseconds(), 1), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return kvRecord{}, unreachable(err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return kvRecord{}, timedOut()
		}
		if ctx.Err() != nil {
			return kvRecord{}, ctx.Err()
		}
		return kvRecord{}, unreachable(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return kvRecord{}, unreachable(err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusRequestTimeout:
		return kvRecord{}, timedOut()
	default:
		return kvRecord{}, unreachable(fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(body)))
	}
	var rec kvRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return kvRecord{}, unreachable(fmt.Errorf("bad bootstrap record: %w", err))
	}
	return rec, nil
}

// bootstrapHandler serves an SGLang prefill engine's bootstrap server: GET /route (the real routes: the
// server info with every rank -1, else one rank's address), GET /health, and the simulator's own
// GET /room/{room}?dp_rank=N, a decode connecting for a room on a rank (the handshake) and long-polling
// for its KV record.
func (e *Engine) bootstrapHandler() http.Handler {
	mux := http.NewServeMux()
	text := func(w http.ResponseWriter, status int, msg string) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, msg)
	}
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { text(w, http.StatusOK, "OK") })
	// common/conn.py CommonKVBootstrapServer._handle_route_get.
	mux.HandleFunc("GET /route", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		names := []string{"prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank"}
		vals := make([]int, len(names))
		for i, name := range names {
			s := q.Get(name)
			if s == "" {
				text(w, http.StatusBadRequest, "Missing inputs for bootstrap server.")
				return
			}
			v, err := strconv.Atoi(s)
			if err != nil {
				text(w, http.StatusInternalServerError, "500 Internal Server Error\n\nServer got itself in trouble")
				return
			}
			vals[i] = v
		}
		if vals[0] == -1 && vals[1] == -1 && vals[2] == -1 && vals[3] == -1 {
			writeJSON(w, http.StatusOK, e.serverInfoForDecodes())
			return
		}
		if vals[0] < 0 || vals[0] >= len(e.ranks) || vals[1] != 0 || vals[2] != 0 || vals[3] != 0 {
			text(w, http.StatusNotFound, fmt.Sprintf("Bootstrap info not found for dp_rank=%s cp_rank=%s tp_rank=%s pp_rank=%s",
				q.Get(names[0]), q.Get(names[1]), q.Get(names[2]), q.Get(names[3])))
			return
		}
		writeJSON(w, http.StatusOK, prefillRankInfo{RankIP: e.cfg.Host, RankPort: e.BootstrapPort()})
	})
	mux.HandleFunc("GET /room/{room}", func(w http.ResponseWriter, r *http.Request) {
		key, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
		if err != nil {
			writeSimError(w, http.StatusBadRequest, "bad room: "+err.Error())
			return
		}
		rank := 0
		if s := r.URL.Query().Get("dp_rank"); s != "" {
			if rank, err = strconv.Atoi(s); err != nil || rank < 0 || rank >= len(e.ranks) {
				writeSimError(w, http.StatusNotFound, fmt.Sprintf("no dp_rank %q on this prefill (dp_size %d)", s, len(e.ranks)))
				return
			}
		}
		wait := e.cfg.BootstrapTimeout
		if ms, err := strconv.ParseInt(r.URL.Query().Get("timeout_ms"), 10, 64); err == nil && ms >= 0 {
			wait = min(wait, time.Duration(ms)*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		rec, err := e.ranks[rank].rooms.connect(ctx, key)
		if errors.Is(err, errRoomCollision) {
			// Another decode holds the room: this one's transfer never completes.
			e.stats.roomCollisions.Add(1)
			<-ctx.Done()
		}
		if err != nil {
			if r.Context().Err() != nil {
				return // the decode went away
			}
			writeSimError(w, http.StatusRequestTimeout, "room "+strconv.FormatUint(key, 10)+" not published in time")
			return
		}
		writeJSON(w, http.StatusOK, rec)
	})
	return mux
}
