package sim

import (
	"encoding/json"
	"net/http"
	"strconv"
	"sync"

	"github.com/sluicegw/sluice/internal/jsonx"
)

// Responses on the generation hot path are built with append functions into pooled buffers: the
// instant-mode benchmark serves thousands of requests per second and reflection-based encoding showed.

var bufPool = sync.Pool{New: func() any { b := make([]byte, 0, 1024); return &b }}

func getBuf() *[]byte { return bufPool.Get().(*[]byte) }

func putBuf(b *[]byte) {
	if cap(*b) > 1<<16 {
		return
	}
	*b = (*b)[:0]
	bufPool.Put(b)
}

func appendInt(dst []byte, v int64) []byte { return strconv.AppendInt(dst, v, 10) }

// writeJSON writes v (encoding/json) with status; for cold paths.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// appendErrorBody appends an OpenAI-shaped error object {"error":{"message","type","param","code"}}.
func appendErrorBody(dst []byte, status int, typ, msg, code string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonx.AppendString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = jsonx.AppendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	if code == "" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonx.AppendString(dst, code)
	}
	// SGLang and vLLM also report the numeric status inside the error object.
	dst = append(dst, `,"status":`...)
	dst = appendInt(dst, int64(status))
	return append(dst, "}}"...)
}

// writeError writes an OpenAI-shaped error body.
func writeError(w http.ResponseWriter, status int, typ, msg, code string) {
	b := getBuf()
	defer putBuf(b)
	*b = appendErrorBody(*b, status, typ, msg, code)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(*b)
}
