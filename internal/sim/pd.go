package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"
)

// receiveKV gets the KV of a decode-phase sample from its prefill engine. ok is false when the sample
// carries no handshake and must recompute its prompt.
func (e *Engine) receiveKV(ctx context.Context, sp *sampleSpec) (kvRecord, bool, error) {
	var rec kvRecord
	var err error
	switch {
	case sp.hs.bootstrap:
		rec, err = e.waitRoom(ctx, sp.hs.host, sp.hs.port, sp.hs.room)
	case sp.hs.kv != nil && sp.hs.kv.DoRemotePrefill:
		rec, err = e.pullKV(ctx, sp.hs.kv)
	default:
		return rec, false, nil
	}
	if err != nil {
		return rec, false, err
	}
	if rec.PromptHash != sp.prompt.hash || rec.PromptTokens != len(sp.prompt.ids) {
		e.stats.bootstrapMismatches.Add(1)
		return rec, false, fmt.Errorf("%w: prefill computed a different prompt (%d tokens, hash %x) than this request's (%d tokens, hash %x)",
			errBootstrapMismatch, rec.PromptTokens, rec.PromptHash, len(sp.prompt.ids), sp.prompt.hash)
	}
	return rec, true, nil
}

// waitRoom long-polls the prefill's bootstrap server for the room, up to the bootstrap timeout.
func (e *Engine) waitRoom(ctx context.Context, host string, port int, room uint64) (kvRecord, error) {
	e.stats.bootstrapWaits.Add(1)
	e.stats.bootstrapWaiting.Add(1)
	defer e.stats.bootstrapWaiting.Add(-1)
	timeout := e.cfg.BootstrapTimeout
	ctx, cancel := context.WithTimeout(ctx, timeout+time.Second) // the server answers 408 first
	defer cancel()
	u := "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/room/" + strconv.FormatUint(room, 10) +
		"?timeout_ms=" + strconv.FormatInt(timeout.Milliseconds(), 10)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return kvRecord{}, fmt.Errorf("%w: %w", errKVTransfer, err)
	}
	resp, err := e.client.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() != nil {
			return kvRecord{}, e.bootstrapTimedOut(room)
		}
		if ctx.Err() != nil {
			return kvRecord{}, ctx.Err()
		}
		return kvRecord{}, fmt.Errorf("%w: bootstrap server %s: %w", errKVTransfer, net.JoinHostPort(host, strconv.Itoa(port)), err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return kvRecord{}, fmt.Errorf("%w: %w", errKVTransfer, err)
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusRequestTimeout:
		return kvRecord{}, e.bootstrapTimedOut(room)
	default:
		return kvRecord{}, fmt.Errorf("%w: bootstrap server answered %d: %s", errKVTransfer, resp.StatusCode, bytes.TrimSpace(body))
	}
	var rec kvRecord
	if err := json.Unmarshal(body, &rec); err != nil {
		return kvRecord{}, fmt.Errorf("%w: bad bootstrap record: %w", errKVTransfer, err)
	}
	return rec, nil
}

func (e *Engine) bootstrapTimedOut(room uint64) error {
	e.stats.bootstrapTimeouts.Add(1)
	e.metrics.bootstrapTimeouts.Inc()
	return fmt.Errorf("%w: KV cache of bootstrap room %d did not arrive within %s", errBootstrapTimeout, room, e.cfg.BootstrapTimeout)
}

// pullRequest is the body of POST /sim/kv/pull.
type pullRequest struct {
	RemoteEngineID  string   `json:"remote_engine_id"`
	RemoteBlockIDs  []uint32 `json:"remote_block_ids"`
	RemoteRequestID string   `json:"remote_request_id,omitempty"`
}

// pullKV fetches a vLLM-style KV record from the prefill engine named in the params.
func (e *Engine) pullKV(ctx context.Context, p *kvParams) (kvRecord, error) {
	if p.RemoteHost == nil || p.RemotePort == nil || len(p.RemoteBlockIDs) == 0 {
		return kvRecord{}, fmt.Errorf("%w: kv_transfer_params need remote_host, remote_port and remote_block_ids", errBadRequest)
	}
	pr := pullRequest{RemoteBlockIDs: p.RemoteBlockIDs, RemoteRequestID: p.RemoteRequestID}
	if p.RemoteEngineID != nil {
		pr.RemoteEngineID = *p.RemoteEngineID
	}
	body, _ := json.Marshal(pr)
	u := "http://" + net.JoinHostPort(*p.RemoteHost, strconv.Itoa(*p.RemotePort)) + "/sim/kv/pull"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return kvRecord{}, fmt.Errorf("%w: %w", errKVTransfer, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := e.client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return kvRecord{}, ctx.Err()
		}
		return kvRecord{}, fmt.Errorf("%w: %w", errKVTransfer, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return kvRecord{}, fmt.Errorf("%w: %w", errKVTransfer, err)
	}
	if resp.StatusCode != http.StatusOK {
		return kvRecord{}, fmt.Errorf("%w: prefill engine answered %d: %s", errKVTransfer, resp.StatusCode, bytes.TrimSpace(b))
	}
	var rec kvRecord
	if err := json.Unmarshal(b, &rec); err != nil {
		return kvRecord{}, fmt.Errorf("%w: bad KV record: %w", errKVTransfer, err)
	}
	return rec, nil
}

// publishKV makes a prefill-phase sample's KV available to its decode.
func (e *Engine) publishKV(sp *sampleSpec, cached int) (*kvParams, error) {
	rec := kvRecord{PromptHash: sp.prompt.hash, PromptTokens: len(sp.prompt.ids), CachedTokens: cached, EngineID: e.id}
	switch {
	case sp.hs.bootstrap:
		if e.rooms == nil {
			return nil, fmt.Errorf("%w: this engine has no bootstrap server (role %s, protocol %s)", errBadRequest, e.cfg.Role, e.cfg.Protocol)
		}
		e.rooms.publish(sp.hs.room, rec)
		return nil, nil
	case sp.hs.kv != nil && sp.hs.kv.DoRemoteDecode:
		n := uint32(max(1, (len(sp.prompt.ids)+e.cfg.BlockSize-1)/e.cfg.BlockSize))
		first := e.nextBlock.Add(n) - n + 1
		ids := make([]uint32, n)
		for i := range ids {
			ids[i] = first + uint32(i)
		}
		e.kvStore.publish(uint64(first), rec)
		host, port, id := e.cfg.Host, e.Port(), e.id
		return &kvParams{
			DoRemotePrefill: true,
			RemoteEngineID:  &id,
			RemoteBlockIDs:  ids,
			RemoteHost:      &host,
			RemotePort:      &port,
			RemoteRequestID: e.id + "-" + strconv.FormatUint(uint64(first), 10),
		}, nil
	}
	return nil, nil
}

// bootstrapHandler serves the SGLang-style bootstrap server of a prefill engine.
func (e *Engine) bootstrapHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("GET /room/{room}", func(w http.ResponseWriter, r *http.Request) {
		room, err := strconv.ParseUint(r.PathValue("room"), 10, 64)
		if err != nil {
			writeError(w, http.StatusBadRequest, "invalid_request_error", "bad room: "+err.Error(), "invalid_room")
			return
		}
		wait := e.cfg.BootstrapTimeout
		if ms, err := strconv.ParseInt(r.URL.Query().Get("timeout_ms"), 10, 64); err == nil && ms >= 0 {
			wait = min(wait, time.Duration(ms)*time.Millisecond)
		}
		ctx, cancel := context.WithTimeout(r.Context(), wait)
		defer cancel()
		rec, err := e.rooms.claim(ctx, room)
		if err != nil {
			if r.Context().Err() != nil {
				return // the decode went away
			}
			writeError(w, http.StatusRequestTimeout, "timeout", "room "+strconv.FormatUint(room, 10)+" not published in time", "bootstrap_timeout")
			return
		}
		writeJSON(w, http.StatusOK, rec)
	})
	return mux
}

// handleKVPull serves POST /sim/kv/pull: a decode engine takes a vLLM-style KV record.
func (e *Engine) handleKVPull(w http.ResponseWriter, r *http.Request) {
	var pr pullRequest
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&pr); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "malformed JSON: "+err.Error(), "invalid_json")
		return
	}
	if pr.RemoteEngineID != "" && pr.RemoteEngineID != e.id {
		writeError(w, http.StatusNotFound, "invalid_request_error", "remote_engine_id "+pr.RemoteEngineID+" is not this engine ("+e.id+")", "kv_not_found")
		return
	}
	if len(pr.RemoteBlockIDs) == 0 {
		writeError(w, http.StatusBadRequest, "invalid_request_error", "remote_block_ids missing", "invalid_request")
		return
	}
	rec, ok := e.kvStore.take(uint64(pr.RemoteBlockIDs[0]))
	if !ok {
		writeError(w, http.StatusNotFound, "invalid_request_error", "no KV for these blocks (never computed, already pulled or expired)", "kv_not_found")
		return
	}
	writeJSON(w, http.StatusOK, rec)
}
