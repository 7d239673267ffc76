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
// room (the handshake) and waits there for the room's KV. The prefill engine does not start a request
// until the decode has connected for its room (python/sglang/srt/disaggregation/prefill.py
// PrefillBootstrapQueue.pop_bootstrapped skips requests whose sender still polls
// KVPoll.Bootstrapping), and gives up after its bootstrap timeout. A room serves one pair: a second
// request on the same room never completes its handshake and times out (the n > 1 bug: every sample
// of a prompt shares the prompt's room).

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
// decode.py pop_transferred; the timeout text is mooncake/conn.py KVSender.poll / KVReceiver.poll).
func (e *Engine) prefillBootstrapFailed(sp *sampleSpec, why string) error {
	return abortError(errBootstrapTimeout, http.StatusInternalServerError,
		"Prefill bootstrap failed for request rank=0 req.rid='%s' req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): %s",
		sp.rid, sp.hs.room, sp.hs.room, why)
}

func (e *Engine) decodeTransferFailed(kind error, sp *sampleSpec, why string) error {
	return abortError(kind, http.StatusInternalServerError,
		"Decode transfer failed for request rank=0 decode_req.req.rid='%s' decode_req.req.bootstrap_room=%d with exception KVTransferError(bootstrap_room=%d): %s",
		sp.rid, sp.hs.room, sp.hs.room, why)
}

func (e *Engine) timedOutIn(sp *sampleSpec, state string) string {
	return fmt.Sprintf("Request %d timed out after %.1fs in KVPoll.%s", sp.hs.room, e.cfg.BootstrapTimeout.Seconds(), state)
}

// collide holds a sample whose room another sample on this engine holds until the bootstrap timeout:
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
// the sample's room, up to the bootstrap timeout.
func (e *Engine) awaitDecode(ctx context.Context, sp *sampleSpec) error {
	if e.rooms == nil {
		return abortError(errKVTransfer, http.StatusInternalServerError, "this engine has no bootstrap server (role %s, protocol %s)", e.cfg.Role, e.cfg.Protocol)
	}
	e.stats.handshakeWaits.Add(1)
	e.stats.handshakeWaiting.Add(1)
	defer e.stats.handshakeWaiting.Add(-1)
	wctx, cancel := context.WithTimeout(ctx, e.cfg.BootstrapTimeout)
	defer cancel()
	err := e.rooms.awaitConnect(wctx, sp.hs.room)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	e.stats.handshakeTimeouts.Add(1)
	return e.prefillBootstrapFailed(sp, e.timedOutIn(sp, "Bootstrapping"))
}

// waitRoom is the decode side: connect to the prefill's bootstrap server for the room and long-poll
// for its KV record, up to the bootstrap timeout.
func (e *Engine) waitRoom(ctx context.Context, sp *sampleSpec) (kvRecord, error) {
	e.stats.bootstrapWaits.Add(1)
	e.stats.bootstrapWaiting.Add(1)
	defer e.stats.bootstrapWaiting.Add(-1)
	timeout := e.cfg.BootstrapTimeout
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second) // the server answers 408 first
	defer cancel()
	addr := net.JoinHostPort(sp.hs.host, strconv.Itoa(sp.hs.port))
	u := "http://" + addr + "/room/" + strconv.FormatUint(sp.hs.room, 10) +
		"?timeout_ms=" + strconv.FormatInt(timeout.Milliseconds(), 10)
	timedOut := func() error {
		e.stats.bootstrapTimeouts.Add(1)
		e.metrics.bootstrapTimeouts.Inc()
		return e.decodeTransferFailed(errBootstrapTimeout, sp, e.timedOutIn(sp, "WaitingForInput"))
	}
	unreachable := func(detail error) error {
		return e.decodeTransferFailed(errKVTransfer, sp, fmt.Sprintf("Failed to get prefill server info from bootstrap server %s: %v", addr, detail))
	}
	if sp.hs.host == "" {
		return kvRecord{}, unreachable(errors.New("bootstrap_host is missing"))
	}
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

// bootstrapHandler serves a prefill engine's bootstrap server: GET /room/{room} is a decode
// connecting for a room (the handshake) and long-polling for its KV record.
func (e *Engine) bootstrapHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /room/{room}", func(w http.ResponseWriter, r *http.Request) {
		key, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
		if err != nil {
			writeSimError(w, http.StatusBadRequest, "bad room: "+err.Error())
			return
		}
		wait := e.cfg.BootstrapTimeout
		if ms, err := strconv.ParseInt(r.URL.Query().Get("timeout_ms"), 10, 64); err == nil && ms >= 0 {
			wait = min(wait, time.Duration(ms)*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		rec, err := e.rooms.connect(ctx, key)
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
