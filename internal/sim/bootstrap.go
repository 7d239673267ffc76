package sim

import (
	"bytes"
	"encoding/json"
	"net/http"
)

// promptBootstrap is one prompt's SGLang bootstrap fields after the engine's normalisation; every
// sample of the prompt uses them.
type promptBootstrap struct {
	host string // "" when absent or null
	port *int   // nil when absent or null: the engine's own --disaggregation-bootstrap-port applies
	room *uint64
}

// bootstrapField is one of bootstrap_host, bootstrap_port, bootstrap_room as sent: absent/null, a
// scalar, or a list whose entries may be null.
type bootstrapField[T any] struct {
	list   bool
	values []*T // one entry for a scalar; nil for absent or null
}

func parseBootstrapField[T any](raw json.RawMessage, name string) (bootstrapField[T], error) {
	var f bootstrapField[T]
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return f, nil
	}
	if raw[0] == '[' {
		f.list = true
		if err := json.Unmarshal(raw, &f.values); err != nil {
			return f, schemaError("%s: %v", name, err)
		}
		return f, nil
	}
	var v T
	if err := json.Unmarshal(raw, &v); err != nil {
		return f, schemaError("%s: %v", name, err)
	}
	f.values = []*T{&v}
	return f, nil
}

// errRoomListIndex is the IndexError SGLang raises when a bootstrap list is shorter than the batch:
// GenerateReqInput.__getitem__ indexes it (io_struct.py). The OpenAI routes answer it through
// serving_base's catch-all; /generate does not catch it.
func errRoomListIndex() error {
	return &engineError{kind: errEngineCrash, status: http.StatusInternalServerError,
		msg: "Internal server error: list index out of range"}
}

// normalizeBootstrap gives each of batch prompts its bootstrap fields exactly as SGLang's
// GenerateReqInput does (python/sglang/srt/managers/io_struct.py, normalize_batch_and_arguments):
//
//   - a single prompt with n = 1 keeps its scalars;
//   - otherwise (a batch, or n > 1, which turns a single prompt into a batch of one) the fields are
//     expanded to batch*n entries in _normalize_bootstrap_params: a scalar host or port is repeated, a
//     scalar room becomes room+i for entry i, a list is repeated n times (list * n); then prompt i
//     reads entry i (__getitem__), and the tokenizer manager sends all n samples of prompt i with that
//     same entry (tokenizer_manager.py _handle_batch_request copies tokenized_objs[i] n times). So the n
//     samples of a prompt always share one room, whatever the gateway sent.
//
// A list shorter than the batch fails as SGLang does (IndexError); a longer one is silently cut.
func normalizeBootstrap(req *apiRequest, prompts, n int, batch bool) ([]promptBootstrap, error) {
	hosts, err := parseBootstrapField[string](req.BootstrapHost, "bootstrap_host")
	if err != nil {
		return nil, err
	}
	ports, err := parseBootstrapField[int](req.BootstrapPort, "bootstrap_port")
	if err != nil {
		return nil, err
	}
	rooms, err := parseBootstrapField[uint64](req.BootstrapRoom, "bootstrap_room")
	if err != nil {
		return nil, err
	}
	out := make([]promptBootstrap, prompts)
	if !batch && n <= 1 {
		for _, f := range []struct {
			name string
			list bool
			len  int
		}{{"bootstrap_host", hosts.list, len(hosts.values)}, {"bootstrap_room", rooms.list, len(rooms.values)}, {"bootstrap_port", ports.list, len(ports.values)}} {
			if f.list && f.len != 1 {
				// SGLang would carry the list into the scheduler as the room itself; not modelled.
				return nil, schemaError("%s: a list needs a batch of prompts or n > 1 (a single request takes a scalar)", f.name)
			}
		}
		out[0] = promptBootstrap{room: first(rooms.values)}
		if h := first(hosts.values); h != nil {
			out[0].host = *h
		}
		out[0].port = first(ports.values)
		return out, nil
	}
	num := prompts * max(n, 1)
	for i := range out {
		h, ok := expandedEntry(hosts, i, num, n, false)
		p, ok2 := expandedEntry(ports, i, num, n, false)
		r, ok3 := expandedEntry(rooms, i, num, n, true)
		if !ok || !ok2 || !ok3 {
			return nil, errRoomListIndex()
		}
		if h != nil {
			out[i].host = *h
		}
		out[i].port, out[i].room = p, r
	}
	return out, nil
}

func first[T any](vs []*T) *T {
	if len(vs) == 0 {
		return nil
	}
	return vs[0]
}

// expandedEntry is entry i of a field after _normalize_bootstrap_params expanded it to num entries;
// ok is false when that entry does not exist (IndexError).
func expandedEntry[T any](f bootstrapField[T], i, num, n int, isRoom bool) (*T, bool) {
	switch {
	case len(f.values) == 0 && !f.list:
		return nil, true // None: [None] * num
	case !f.list:
		if !isRoom {
			return f.values[0], true // [value] * num
		}
		// [room + i for i in range(num)]: only rooms are numbers; T is uint64 here.
		if r, isU := any(f.values[0]).(*uint64); isU {
			v := *r + uint64(i)
			return any(&v).(*T), i < num
		}
		return f.values[0], true
	default:
		expanded := len(f.values) * max(n, 1) // list * parallel_sample_num
		if i >= expanded {
			return nil, false
		}
		return f.values[i%len(f.values)], true
	}
}
