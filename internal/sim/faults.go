package sim

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Faults are the failures an engine injects. Set them in Config.Faults, with Engine.SetFaults, or at run
// time with POST /sim/faults (JSON with these field names; fields absent from the body keep their value).
type Faults struct {
	// ErrorRate is the probability (0..1) that a generation request fails at once with ErrorStatus.
	ErrorRate float64 `json:"error_rate"`
	// ErrorStatus is the HTTP status of injected errors (default 503).
	ErrorStatus int `json:"error_status"`
	// Hang makes generation requests block until the client goes away (or the engine closes).
	Hang bool `json:"hang"`
	// Hold makes generation requests that start while it is set wait until it is cleared (or the client
	// goes away); a test uses it to keep requests in flight for exactly as long as its scenario needs.
	Hold bool `json:"hold"`
	// HoldSkip lets the first HoldSkip generation requests since the faults were set run; the later
	// ones are held. A test staggers requests that arrive together with it (the n single-sample
	// requests of a split n > 1), which no timing could do reliably.
	HoldSkip int `json:"hold_skip"`
	// LatencyMS is added before a generation request starts.
	LatencyMS float64 `json:"latency_ms"`
	// SlownessFactor multiplies every modelled duration (default 1).
	SlownessFactor float64 `json:"slowness_factor"`
	// DieAfterTokens, when > 0, aborts the connection after that many output tokens were written.
	DieAfterTokens int `json:"die_after_tokens"`
	// StallAfterTokens, when > 0, stops each stream that starts while it is set after that many
	// output tokens, until it is cleared (or the client goes away): an engine stuck mid-answer. A
	// test uses it to keep a stream in its middle for as long as its scenario needs.
	StallAfterTokens int `json:"stall_after_tokens"`
	// DieBeforeFirstToken aborts a streamed answer's connection after its head, before its first token:
	// an engine that dies between accepting a stream and generating. (SGLang's OpenAI routes write the
	// head with their first chunk, so there the connection breaks before any answer.)
	DieBeforeFirstToken bool `json:"die_before_first_token"`
	// FailHealth makes /health and /health_generate answer 503.
	FailHealth bool `json:"fail_health"`
	// RefuseConnections closes the listener (new dials fail, idle keep-alive connections are closed);
	// setting it back to false listens again on the same port.
	RefuseConnections bool `json:"refuse_connections"`
	// OmitKVTransferParams makes a vLLM prefill keep nothing for its decode even when the length cap
	// ended it: with NIXL, kv_transfer_params is null (the decode must then recompute); with Mooncake,
	// no KV is kept under the transfer_id (the decode's pull times out).
	OmitKVTransferParams bool `json:"omit_kv_transfer_params"`
	// CorruptTokenizer makes the engines' gRPC GetTokenizer send a SHA-256 that does not match its
	// bundle, as a bundle damaged on the way would arrive.
	CorruptTokenizer bool `json:"corrupt_tokenizer"`
	// Roles, when not empty, limits every fault to engines of these roles.
	Roles []Role `json:"roles,omitempty"`
	// Paths, when not empty, limits the request faults (error, hang, latency, slowness, die) to these
	// HTTP paths or RPC procedures; otherwise they apply to every generation endpoint.
	Paths []string `json:"paths,omitempty"`
}

func (f *Faults) validate() error {
	var errs []error
	if f.ErrorRate < 0 || f.ErrorRate > 1 {
		errs = append(errs, fmt.Errorf("error_rate %g not in [0,1]", f.ErrorRate))
	}
	if f.ErrorStatus != 0 && (f.ErrorStatus < 400 || f.ErrorStatus > 599) {
		errs = append(errs, fmt.Errorf("error_status %d not in [400,599]", f.ErrorStatus))
	}
	if f.LatencyMS < 0 {
		errs = append(errs, fmt.Errorf("latency_ms %g < 0", f.LatencyMS))
	}
	if f.SlownessFactor < 0 {
		errs = append(errs, fmt.Errorf("slowness_factor %g < 0", f.SlownessFactor))
	}
	if f.HoldSkip < 0 {
		errs = append(errs, fmt.Errorf("hold_skip %d < 0", f.HoldSkip))
	}
	if f.DieAfterTokens < 0 {
		errs = append(errs, fmt.Errorf("die_after_tokens %d < 0", f.DieAfterTokens))
	}
	if f.StallAfterTokens < 0 {
		errs = append(errs, fmt.Errorf("stall_after_tokens %d < 0", f.StallAfterTokens))
	}
	return errors.Join(errs...)
}

func (f *Faults) normalize() {
	if f.SlownessFactor == 0 {
		f.SlownessFactor = 1
	}
	if f.ErrorStatus == 0 {
		f.ErrorStatus = 503
	}
}

// appliesTo reports whether the faults apply to an engine of role r.
func (f *Faults) appliesTo(r Role) bool {
	return len(f.Roles) == 0 || slices.Contains(f.Roles, r)
}

// requestFaults are the faults that apply to one request, resolved once at its start.
type requestFaults struct {
	errorStatus    int // 0: no injected error
	hang           bool
	hold           bool
	latency        time.Duration
	slowness       float64
	dieAfter       int
	stallAfter     int             // tokens before the stream stalls (0: never)
	stalled        <-chan struct{} // closed when the stall is cleared (set by applyRequestFaults)
	dieBeforeFirst bool
	omitKV         bool
}

func (f *Faults) forRequest(role Role, path string, generation bool, randFloat func() float64) requestFaults {
	rf := requestFaults{slowness: 1}
	if !f.appliesTo(role) {
		return rf
	}
	rf.omitKV = f.OmitKVTransferParams // not a per-path fault: it is about the response's content
	if len(f.Paths) > 0 {
		if !slices.Contains(f.Paths, path) {
			return rf
		}
	} else if !generation {
		return rf
	}
	if f.ErrorRate > 0 && randFloat() < f.ErrorRate {
		rf.errorStatus = f.ErrorStatus
	}
	rf.hang = f.Hang
	rf.hold = f.Hold
	rf.latency = time.Duration(f.LatencyMS * float64(time.Millisecond))
	rf.slowness = f.SlownessFactor
	rf.dieAfter = f.DieAfterTokens
	rf.stallAfter = f.StallAfterTokens
	rf.dieBeforeFirst = f.DieBeforeFirstToken
	return rf
}
