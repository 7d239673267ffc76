package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Endpoints.
const (
	EndpointChat        = "chat"
	EndpointCompletions = "completions"
)

// Error codes the client assigns itself (the server's come from error.code of its error body).
const (
	CodeDropped     = "client_dropped"   // open loop: --max-inflight reached, never sent
	CodeTimeout     = "client_timeout"   // --timeout ended the request
	CodeCanceled    = "client_canceled"  // the run was cancelled (interrupt) while the request ran
	CodeConnRefused = "conn_refused"     // nothing listening
	CodeConnReset   = "conn_reset"       // connection reset or closed mid-response
	CodeTransport   = "transport_error"  // any other transport error
	CodeStreamError = "stream_error"     // an error frame without a code inside a 200 stream
	CodeTruncated   = "stream_truncated" // a stream that ended without [DONE]
)

// HeaderWorker is the gateway's response header naming the (decode) worker that served.
const HeaderWorker = "X-Sluice-Worker"

// Record is one measured request. Times are milliseconds; Start is relative to the start of the
// measurement window.
type Record struct {
	Index        int64     `json:"i"`
	StartMS      float64   `json:"start_ms"`
	LagMS        float64   `json:"lag_ms"`
	Status       int       `json:"status"`
	Code         string    `json:"code,omitempty"`
	Error        string    `json:"error,omitempty"`
	TTFTMS       float64   `json:"ttft_ms"`
	E2EMS        float64   `json:"e2e_ms"`
	ITLMS        []float64 `json:"itl_ms,omitempty"`
	OutputTokens int       `json:"output_tokens"`
	Worker       string    `json:"worker,omitempty"`
	// Class is the request's class (classes workload).
	Class string `json:"class,omitempty"`
	// stream bookkeeping, not serialised
	done bool
}

// OK reports whether the request succeeded.
func (r *Record) OK() bool { return r.Status == http.StatusOK && r.Code == "" && r.Error == "" }

// NewTransport returns an HTTP transport tuned for load generation: many idle keep-alive connections
// per host, no compression, no proxy from the environment (loopback benchmarks must not go through one).
func NewTransport(maxConns int) *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		ForceAttemptHTTP2:   false,
		WriteBufferSize:     32 << 10,
		ReadBufferSize:      32 << 10,
	}
}

// requester sends one request and fills its record.
type requester struct {
	hc     *http.Client
	url    string
	apiKey string
	stream bool
	bufs   sync.Pool // *[]byte, response bodies of non-streaming requests
}

func newRequester(hc *http.Client, baseURL, endpoint, apiKey string, stream bool) *requester {
	path := "/v1/chat/completions"
	if endpoint == EndpointCompletions {
		path = "/v1/completions"
	}
	return &requester{hc: hc, url: strings.TrimRight(baseURL, "/") + path, apiKey: apiKey, stream: stream,
		bufs: sync.Pool{New: func() any { b := make([]byte, 0, 4096); return &b }}}
}

// do sends body with the extra headers and fills rec (Status, Code, Error, TTFT, ITL, E2E,
// OutputTokens, Worker).
func (q *requester) do(ctx context.Context, body []byte, header map[string]string, rec *Record) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, q.url, bytes.NewReader(body))
	if err != nil {
		rec.Code, rec.Error = CodeTransport, err.Error()
		return
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	if q.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+q.apiKey)
	}
	resp, err := q.hc.Do(req)
	if err != nil {
		rec.Code, rec.Error = classifyErr(ctx, err), shortErr(err)
		rec.E2EMS = ms(time.Since(start))
		return
	}
	defer resp.Body.Close()
	rec.Status = resp.StatusCode
	rec.Worker = resp.Header.Get(HeaderWorker)
	switch {
	case resp.StatusCode != http.StatusOK:
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
		rec.Code = errorCode(b)
		if rec.Code == "" {
			rec.Error = "http " + resp.Status
		}
		_, _ = io.Copy(io.Discard, resp.Body)
	case q.stream:
		err = readSSE(resp.Body, start, rec)
		if err != nil {
			rec.Code, rec.Error = classifyErr(ctx, err), shortErr(err)
		} else if !rec.done && rec.Code == "" {
			rec.Code, rec.Error = CodeTruncated, "stream ended without [DONE]"
		}
	default:
		bp := q.bufs.Get().(*[]byte)
		b, err := readAllInto((*bp)[:0], resp.Body)
		if err != nil {
			rec.Code, rec.Error = classifyErr(ctx, err), shortErr(err)
		} else {
			rec.TTFTMS = ms(time.Since(start))
			if n, ok := findInt(b, `"completion_tokens":`); ok {
				rec.OutputTokens = n
			}
		}
		if cap(b) <= 1<<20 { // do not keep huge buffers alive
			*bp = b[:0]
			q.bufs.Put(bp)
		}
	}
	rec.E2EMS = ms(time.Since(start))
}

func readAllInto(b []byte, r io.Reader) ([]byte, error) {
	for {
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
		n, err := r.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
	}
}

// readSSE reads an OpenAI SSE stream, timing content chunks from start.
func readSSE(body io.Reader, start time.Time, rec *Record) error {
	br := bufio.NewReaderSize(body, 16<<10)
	var last time.Time
	chunks := 0
	usage := -1
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A very long line: gather it whole (rare: huge chunks).
			rest, err2 := br.ReadBytes('\n')
			line = append(append([]byte(nil), line...), rest...)
			err = err2
		}
		if len(line) > 0 {
			now := time.Now()
			data, ok := bytes.CutPrefix(bytes.TrimRight(line, "\r\n"), []byte("data:"))
			if ok {
				data = bytes.TrimLeft(data, " ")
				switch {
				case bytes.Equal(data, []byte("[DONE]")):
					rec.done = true
				case bytes.HasPrefix(data, []byte(`{"error"`)):
					if rec.Code == "" {
						rec.Code = errorCode(data)
						if rec.Code == "" {
							rec.Code = CodeStreamError
						}
					}
				default:
					if hasContent(data) {
						if chunks == 0 {
							rec.TTFTMS = ms(now.Sub(start))
						} else {
							rec.ITLMS = append(rec.ITLMS, ms(now.Sub(last)))
						}
						last = now
						chunks++
					}
					if n, ok := findInt(data, `"completion_tokens":`); ok {
						usage = n
					}
				}
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
	}
	rec.OutputTokens = chunks
	if usage >= 0 {
		rec.OutputTokens = usage
	}
	return nil
}

// hasContent reports whether a chunk carries generated text: a non-empty "content" (chat) or "text"
// (completions) string.
func hasContent(data []byte) bool {
	for _, key := range [...]string{`"content":`, `"text":`} {
		rest := data
		for {
			i := bytes.Index(rest, []byte(key))
			if i < 0 {
				break
			}
			rest = bytes.TrimLeft(rest[i+len(key):], " ")
			if len(rest) >= 2 && rest[0] == '"' && rest[1] != '"' {
				return true
			}
		}
	}
	return false
}

// findInt finds key (e.g. `"completion_tokens":`) and parses the integer after it.
func findInt(b []byte, key string) (int, bool) {
	i := bytes.LastIndex(b, []byte(key))
	if i < 0 {
		return 0, false
	}
	rest := bytes.TrimLeft(b[i+len(key):], " ")
	n, digits := 0, 0
	for _, c := range rest {
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + int(c-'0')
		digits++
	}
	return n, digits > 0
}

// errorCode extracts error.code (string or number) from an OpenAI error body; "" when absent.
func errorCode(b []byte) string {
	var body struct {
		Error struct {
			Code json.RawMessage `json:"code"`
			Type string          `json:"type"`
		} `json:"error"`
	}
	if json.Unmarshal(b, &body) != nil {
		return ""
	}
	c := body.Error.Code
	var s string
	if json.Unmarshal(c, &s) == nil && s != "" {
		return s
	}
	if len(c) > 0 && string(c) != "null" {
		return string(c)
	}
	return body.Error.Type
}

func classifyErr(ctx context.Context, err error) string {
	var ne net.Error
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return CodeCanceled
	case ctx.Err() != nil, errors.Is(err, context.DeadlineExceeded), errors.Is(err, os.ErrDeadlineExceeded),
		errors.As(err, &ne) && ne.Timeout():
		return CodeTimeout
	case errors.Is(err, syscall.ECONNREFUSED):
		return CodeConnRefused
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF),
		errors.Is(err, syscall.EPIPE):
		return CodeConnReset
	default:
		return CodeTransport
	}
}

func shortErr(err error) string {
	s := err.Error()
	if len(s) > 200 {
		s = s[:200]
	}
	return s
}
