package body

import (
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/jsonx"
)

// RoomMask keeps bootstrap rooms within 63 bits: SGLang (Python) and the Rust gateway treat them as
// non-negative signed 64-bit integers.
const RoomMask = 1<<63 - 1

// NewRoom returns a fresh bootstrap room from a 64-bit random source (for example
// (*math/rand/v2.Rand).Uint64); randomness is injected so tests can be deterministic.
func NewRoom(rnd func() uint64) uint64 { return rnd() & RoomMask }

// NewRooms returns count fresh rooms.
func NewRooms(rnd func() uint64, count int) []uint64 {
	rooms := make([]uint64, count)
	for i := range rooms {
		rooms[i] = NewRoom(rnd)
	}
	return rooms
}

// SGLang-style PD over HTTP, written from python/sglang/srt/disaggregation/mini_lb.py (SGLang's own
// reference router) and the Rust gateway's pd_router.rs: the same body goes to the prefill and the
// decode engine, with bootstrap fields telling the decode where to fetch the KV cache.

// SGLangRooms is how many bootstrap rooms an SGLang PD request carries, and whether they go as lists:
// one room per PROMPT, as lists when the prompt is a list (a /generate text or input_ids batch, a
// completions prompt array), else one scalar room. That is what mini_lb (_get_request_batch_size)
// and the Rust gateway send. The engine expands a room list `list * n` for parallel sampling, so the
// n samples of one prompt share its room (tokenizer_manager.py) and collide in the rendezvous: a
// request with n > 1 must be split into single-sample requests first (SingleSampleBody).
func SGLangRooms(req *Request) (count int, asList bool) {
	if req.BatchSize > 0 {
		return req.BatchSize, true
	}
	return 1, false
}

// WorkerRPCRooms is how many rooms the sluice.worker.v1 protocol takes: one per sub-request (prompts x
// samples), sub-request i = prompt*n + sample getting room i (see GRPCTransport); lists when more than one.
func WorkerRPCRooms(req *Request) (count int, asList bool) {
	n := req.Prompts() * max(req.N, 1)
	return n, n > 1
}

// BootstrapHost is the bootstrap_host of a prefill engine at baseURL: its host name, an IPv6 literal
// in brackets as mini_lb sends it (maybe_wrap_ipv6_address).
func BootstrapHost(baseURL string) string {
	if h, ok := plainHost(baseURL); ok {
		return h // every PD request asks: most worker URLs need no url.Parse
	}
	return parsedHost(baseURL)
}

// parsedHost is BootstrapHost through url.Parse.
func parsedHost(baseURL string) string {
	u, err := url.Parse(baseURL)
	if err != nil {
		return ""
	}
	h := u.Hostname()
	if strings.IndexByte(h, ':') >= 0 {
		return "[" + h + "]"
	}
	return h
}

// plainHost is BootstrapHost of a plain scheme://host[:port][/path] URL, read without url.Parse: a
// host name of letters, digits, '.', '-' and '_' or a bracketed IPv6 literal, a port of digits. ok is
// false for anything else (user info, escapes, zones, odd characters), which url.Parse then judges.
func plainHost(baseURL string) (host string, ok bool) {
	scheme, rest, found := strings.Cut(baseURL, "://")
	if !found || scheme == "" || !isAlpha(scheme[0]) {
		return "", false
	}
	for i := range len(scheme) {
		if c := scheme[i]; !isAlpha(c) && !isDigit(c) && c != '+' && c != '-' && c != '.' {
			return "", false
		}
	}
	if i := strings.IndexByte(rest, '/'); i >= 0 {
		for _, c := range []byte(rest[i:]) {
			if c <= ' ' || c == 0x7f || c == '?' || c == '#' || c == '%' {
				return "", false
			}
		}
		rest = rest[:i]
	}
	hostEnd := len(rest)
	if i := strings.LastIndexByte(rest, ':'); i >= 0 && (rest[0] != '[' || i > strings.IndexByte(rest, ']')) {
		port := rest[i+1:]
		for j := range len(port) {
			if !isDigit(port[j]) {
				return "", false
			}
		}
		hostEnd = i
	}
	host = rest[:hostEnd]
	if host == "" {
		return "", false
	}
	if host[0] == '[' {
		if len(host) < 3 || host[len(host)-1] != ']' || strings.IndexByte(host, '%') >= 0 {
			return "", false
		}
		if a, err := netip.ParseAddr(host[1 : len(host)-1]); err != nil || !a.Is6() {
			return "", false
		}
		return host, true
	}
	for i := range len(host) {
		if c := host[i]; !isAlpha(c) && !isDigit(c) && c != '.' && c != '-' && c != '_' {
			return "", false
		}
	}
	return host, true
}

func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }
func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// InjectBootstrap adds SGLang's PD bootstrap fields to a request body (the same body goes to the
// prefill and the decode worker): bootstrap_host, bootstrap_port (port 0 becomes JSON null, which the
// engine reads as "my own --disaggregation-bootstrap-port", scheduler.py) and bootstrap_room. With
// asList false the three are scalars (rooms must hold one); with asList true each is an array of
// len(rooms), host and port repeated. Existing fields are replaced; every other byte is preserved.
func InjectBootstrap(body []byte, host string, port int, rooms []uint64, asList bool) ([]byte, error) {
	if err := checkBootstrap(port, rooms, asList); err != nil {
		return nil, err
	}
	hostJSON := jsonx.AppendString(nil, host)
	portJSON := []byte("null")
	if port > 0 {
		portJSON = strconv.AppendInt(nil, int64(port), 10)
	}
	var hostV, portV, roomV []byte
	if !asList {
		hostV, portV, roomV = hostJSON, portJSON, strconv.AppendUint(nil, rooms[0], 10)
	} else {
		hostV = repeatJSON(hostJSON, len(rooms))
		portV = repeatJSON(portJSON, len(rooms))
		roomV = make([]byte, 0, len(rooms)*20+2)
		roomV = append(roomV, '[')
		for i, r := range rooms {
			if i > 0 {
				roomV = append(roomV, ',')
			}
			roomV = strconv.AppendUint(roomV, r, 10)
		}
		roomV = append(roomV, ']')
	}
	return rewriteObject(body, []field{
		{"bootstrap_host", hostV},
		{"bootstrap_port", portV},
		{"bootstrap_room", roomV},
	})
}

// InjectBootstrap is InjectBootstrap of body, made by appending the scalar fields when body is the
// one r's parse read and it has no bootstrap_* member: the same bytes, without scanning the body
// again or building the values apart.
func (r *Request) InjectBootstrap(body []byte, host string, port int, rooms []uint64, asList bool) ([]byte, error) {
	if err := checkBootstrap(port, rooms, asList); err != nil {
		return nil, err
	}
	if asList || r.end == 0 || r.bootstrapKeys || len(body) != len(r.scanned) || &body[0] != &r.scanned[0] {
		return InjectBootstrap(body, host, port, rooms, asList)
	}
	out := make([]byte, 0, len(body)+len(host)+96)
	out = append(out, body[:r.end]...)
	out = append(out, `,"bootstrap_host":`...)
	out = jsonx.AppendString(out, host)
	out = append(out, `,"bootstrap_port":`...)
	if port > 0 {
		out = strconv.AppendInt(out, int64(port), 10)
	} else {
		out = append(out, "null"...)
	}
	out = append(out, `,"bootstrap_room":`...)
	out = strconv.AppendUint(out, rooms[0], 10)
	return append(out, body[r.end:]...), nil
}

// checkBootstrap refuses what InjectBootstrap cannot write.
func checkBootstrap(port int, rooms []uint64, asList bool) error {
	if len(rooms) == 0 || (!asList && len(rooms) != 1) {
		return fmt.Errorf("backend: InjectBootstrap: %d rooms for asList=%t", len(rooms), asList)
	}
	if port < 0 || port > 65535 {
		return fmt.Errorf("backend: InjectBootstrap: bad port %d", port)
	}
	return nil
}

// SingleSampleBody returns the body of one sample of an n > 1 request: n set to 1 (OpenAI routes) or
// sampling_params.n set to 1 (/generate; a per-prompt sampling_params list is refused: such a request
// is a batch, which is not split).
func SingleSampleBody(route Route, body []byte) ([]byte, error) {
	if route != RouteGenerate {
		return rewriteObject(body, []field{{"n", []byte("1")}})
	}
	m, ok := jsonscan.FindMember(body, 0, "sampling_params")
	if !ok || body[m.ValStart] != '{' {
		return nil, errors.New("backend: SingleSampleBody: sampling_params is not an object")
	}
	sp, err := rewriteObject(m.Value(body), []field{{"n", []byte("1")}})
	if err != nil {
		return nil, err
	}
	return splice(body, m.ValStart, m.ValEnd, sp), nil
}

func repeatJSON(v []byte, n int) []byte {
	out := make([]byte, 0, n*(len(v)+1)+1)
	out = append(out, '[')
	for i := range n {
		if i > 0 {
			out = append(out, ',')
		}
		out = append(out, v...)
	}
	return append(out, ']')
}

// MergeInputLogprobs merges the input logprobs of SGLang PD's two legs of a non-streaming /generate
// request: prefill computed the prompt, so meta_info.input_token_logprobs of the prefill response is
// prepended to decode's (when decode has none, prefill's are set). Responses may be one object or, for
// a batch, arrays of objects paired by index. Streaming responses are not merged (the frames are
// relayed as they come). The decode response is returned unchanged when prefill has no logprobs.
func MergeInputLogprobs(prefillResp, decodeResp []byte) ([]byte, error) {
	ps, pe, err := jsonscan.TopValue(prefillResp)
	if err != nil {
		return nil, fmt.Errorf("backend: prefill response: %w", err)
	}
	ds, de, err := jsonscan.TopValue(decodeResp)
	if err != nil {
		return nil, fmt.Errorf("backend: decode response: %w", err)
	}
	p, d := prefillResp[ps:pe], decodeResp[ds:de]
	switch {
	case p[0] == '{' && d[0] == '{':
		merged, err := mergeOne(p, d)
		if err != nil {
			return nil, err
		}
		return splice(decodeResp, ds, de, merged), nil
	case p[0] == '[' && d[0] == '[':
		var pItems [][]byte
		pa := jsonscan.NewArrIter(p, 0)
		for {
			s, e, ok := pa.Next()
			if !ok {
				break
			}
			pItems = append(pItems, p[s:e])
		}
		out := make([]byte, 0, len(decodeResp)+len(prefillResp))
		out = append(out, decodeResp[:ds]...)
		da := jsonscan.NewArrIter(d, 0)
		last := 0
		for i := 0; ; i++ {
			s, e, ok := da.Next()
			if !ok {
				break
			}
			out = append(out, d[last:s]...)
			item := d[s:e]
			if i < len(pItems) && item[0] == '{' && pItems[i][0] == '{' {
				if item, err = mergeOne(pItems[i], item); err != nil {
					return nil, err
				}
			}
			out = append(out, item...)
			last = e
		}
		out = append(out, d[last:]...)
		return append(out, decodeResp[de:]...), nil
	}
	return nil, errors.New("backend: MergeInputLogprobs: prefill and decode responses have different shapes")
}

func splice(b []byte, s, e int, v []byte) []byte {
	out := make([]byte, 0, len(b)-(e-s)+len(v))
	out = append(out, b[:s]...)
	out = append(out, v...)
	return append(out, b[e:]...)
}

// mergeOne merges one prefill object's meta_info.input_token_logprobs into one decode object.
func mergeOne(prefill, decode []byte) ([]byte, error) {
	pm, ok := jsonscan.FindMember(prefill, 0, "meta_info")
	if !ok || prefill[pm.ValStart] != '{' {
		return decode, nil
	}
	pl, ok := jsonscan.FindMember(prefill, pm.ValStart, "input_token_logprobs")
	if !ok || prefill[pl.ValStart] != '[' {
		return decode, nil
	}
	dm, ok := jsonscan.FindMember(decode, 0, "meta_info")
	if !ok || decode[dm.ValStart] != '{' {
		meta := append([]byte(`{"input_token_logprobs":`), pl.Value(prefill)...)
		meta = append(meta, '}')
		return rewriteObject(decode, []field{{"meta_info", meta}})
	}
	metaRaw := dm.Value(decode)
	merged := pl.Value(prefill)
	if dl, ok := jsonscan.FindMember(metaRaw, 0, "input_token_logprobs"); ok && metaRaw[dl.ValStart] == '[' {
		merged = concatArrays(merged, dl.Value(metaRaw))
	}
	newMeta, err := rewriteObject(metaRaw, []field{{"input_token_logprobs", merged}})
	if err != nil {
		return nil, err
	}
	return splice(decode, dm.ValStart, dm.ValEnd, newMeta), nil
}

// concatArrays joins two raw JSON arrays.
func concatArrays(a, b []byte) []byte {
	ai := trimArray(a)
	bi := trimArray(b)
	out := make([]byte, 0, len(ai)+len(bi)+3)
	out = append(out, '[')
	out = append(out, ai...)
	if len(ai) > 0 && len(bi) > 0 {
		out = append(out, ',')
	}
	out = append(out, bi...)
	return append(out, ']')
}

// trimArray returns the inside of a raw array without surrounding whitespace.
func trimArray(a []byte) []byte {
	inner := a[1 : len(a)-1]
	s := jsonscan.SkipWS(inner, 0)
	e := len(inner)
	for e > s && jsonscan.IsWS(inner[e-1]) {
		e--
	}
	return inner[s:e]
}

// FrameIndex returns the top-level "index" of a /generate stream frame (SGLang sets it on every frame
// of a batch or n > 1 stream: tokenizer_manager.py _handle_batch_request), or 0 when there is none.
func FrameIndex(frame []byte) int {
	if len(frame) == 0 || frame[0] != '{' {
		return 0
	}
	m, ok := jsonscan.FindMember(frame, 0, "index")
	if !ok {
		return 0
	}
	v, ok := jsonscan.ParseInt(m.Value(frame))
	if !ok || v < 0 || v > 1<<20 {
		return 0
	}
	return int(v)
}

// HasInputLogprobs reports whether a /generate answer or frame carries meta_info.input_token_logprobs.
func HasInputLogprobs(obj []byte) bool {
	if len(obj) == 0 || obj[0] != '{' {
		return false
	}
	m, ok := jsonscan.FindMember(obj, 0, "meta_info")
	if !ok || obj[m.ValStart] != '{' {
		return false
	}
	l, ok := jsonscan.FindMember(obj, m.ValStart, "input_token_logprobs")
	return ok && obj[l.ValStart] == '['
}

// MergeStreamInputLogprobs prepends the input logprobs of a prefill stream frame to one decode stream
// frame, as mini_lb's generate_stream does for every decode frame of a return_logprob stream. Frames
// that are not objects (such as [DONE]) and frames without meta_info come back unchanged.
func MergeStreamInputLogprobs(prefillFrame, decodeFrame []byte) ([]byte, error) {
	if len(prefillFrame) == 0 || prefillFrame[0] != '{' || len(decodeFrame) == 0 || decodeFrame[0] != '{' {
		return decodeFrame, nil
	}
	if _, ok := jsonscan.FindMember(decodeFrame, 0, "meta_info"); !ok {
		return decodeFrame, nil
	}
	return mergeOne(prefillFrame, decodeFrame)
}

// SGLangRankHints adds SGLang's data-parallel rank hints (io_struct.py GenerateReqInput, as the Rust
// gateway's pd_router.rs sends them): routed_dp_rank on the prefill leg, and on the decode leg
// disagg_prefill_dp_rank (the prefill rank that holds the KV) and routed_dp_rank (the decode's own
// rank). A rank < 0 adds nothing; with neither rank both legs get body itself.
func SGLangRankHints(body []byte, prefillRank, decodeRank int) (pbody, dbody []byte, err error) {
	pbody, dbody = body, body
	if prefillRank >= 0 {
		if pbody, err = rewriteObject(body, []field{{"routed_dp_rank", strconv.AppendInt(nil, int64(prefillRank), 10)}}); err != nil {
			return nil, nil, err
		}
	}
	var edits []field
	if prefillRank >= 0 {
		edits = append(edits, field{"disagg_prefill_dp_rank", strconv.AppendInt(nil, int64(prefillRank), 10)})
	}
	if decodeRank >= 0 {
		edits = append(edits, field{"routed_dp_rank", strconv.AppendInt(nil, int64(decodeRank), 10)})
	}
	if len(edits) > 0 {
		if dbody, err = rewriteObject(body, edits); err != nil {
			return nil, nil, err
		}
	}
	return pbody, dbody, nil
}

// RoutedRank adds routed_dp_rank to a regular (not disaggregated) SGLang request.
func RoutedRank(body []byte, rank int) ([]byte, error) {
	return rewriteObject(body, []field{{"routed_dp_rank", strconv.AppendInt(nil, int64(rank), 10)}})
}

// AlignRoom moves a bootstrap room to a value congruent to rank modulo dpSize, within 63 bits: an
// engine that ignores the rank hints falls back to room % dp_size, and then still uses the chosen
// rank (the Rust gateway aligns rooms the same way). dpSize < 2 leaves the room as it is.
func AlignRoom(room uint64, dpSize, rank int) uint64 {
	if dpSize < 2 || rank < 0 || rank >= dpSize {
		return room
	}
	d := uint64(dpSize)
	r := room - room%d + uint64(rank)
	if r > RoomMask {
		r -= d
	}
	return r
}
