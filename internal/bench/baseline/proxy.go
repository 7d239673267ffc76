package baseline

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// transport is the upstream client of both proxies: the standard library's transport with a
// keep-alive pool large enough that no proxy under test churns connections (the default keeps 2 idle
// connections per host).
func transport() *http.Transport {
	return &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        16384,
		MaxIdleConnsPerHost: 16384,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
	}
}

// NewReverseProxy is httputil.ReverseProxy in front of upstream, as the standard library builds it
// (NewSingleHostReverseProxy), with its transport's idle pool enlarged. It flushes an event stream
// after every read, by itself.
//
// Each request runs in full-duplex mode: otherwise, when the upstream answers as soon as it has read
// the body, the server closes the client's request body as the first streamed bytes go out while the
// transport may still be making its final read of that body; the transport takes the failed read for
// a broken request and drops the upstream connection mid-stream (about 1.5% of streams spaced like
// tokens failed so on Go 1.26.8).
func NewReverseProxy(upstream *url.URL) http.Handler {
	p := httputil.NewSingleHostReverseProxy(upstream)
	p.Transport = transport()
	p.ErrorLog = log.New(io.Discard, "", 0)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = http.NewResponseController(w).EnableFullDuplex()
		p.ServeHTTP(w, r)
	})
}

// PDProxy is the least a PD proxy for SGLang's bootstrap handoff must do: add bootstrap_host, port
// and a random room to the client's JSON body, send it to the prefill and the decode engine at once,
// relay the decode's answer (flushing after every read when it streams), and read the prefill's to
// its end. Nothing else: one prefill and one decode engine, no routing, admission, retries, metrics
// or tracing. It is the bar the gateway's PD path is measured against.
type PDProxy struct {
	Prefill, Decode *url.URL
	// BootstrapPort is the prefill engine's bootstrap server port.
	BootstrapPort int
	Client        *http.Client
}

// NewPDProxy builds a PD proxy with a pooled client.
func NewPDProxy(prefill, decode *url.URL, bootstrapPort int) *PDProxy {
	return &PDProxy{Prefill: prefill, Decode: decode, BootstrapPort: bootstrapPort, Client: &http.Client{Transport: transport()}}
}

func (p *PDProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	end := bytes.LastIndexByte(body, '}')
	if end < 0 {
		http.Error(w, "not a JSON object", http.StatusBadRequest)
		return
	}
	leg := make([]byte, 0, len(body)+96)
	leg = append(leg, body[:end]...)
	leg = append(leg, `,"bootstrap_host":"`...)
	leg = append(leg, p.Prefill.Hostname()...)
	leg = append(leg, `","bootstrap_port":`...)
	leg = strconv.AppendInt(leg, int64(p.BootstrapPort), 10)
	leg = append(leg, `,"bootstrap_room":`...)
	leg = strconv.AppendUint(leg, rand.Uint64()>>1, 10)
	leg = append(leg, body[end:]...)

	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	prefillDone := make(chan struct{})
	go func() {
		defer close(prefillDone)
		if resp, err := p.send(ctx, p.Prefill, r.URL.Path, leg); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}
	}()
	resp, err := p.send(ctx, p.Decode, r.URL.Path, leg)
	if err != nil {
		cancel()
		<-prefillDone
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	defer func() {
		resp.Body.Close()
		<-prefillDone
	}()
	ct := resp.Header.Get("Content-Type")
	if ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	// A JSON answer is written once when the handler returns (with its length); only a stream is
	// flushed as it comes.
	stream := strings.HasPrefix(ct, "text/event-stream")
	w.WriteHeader(resp.StatusCode)
	rc := http.NewResponseController(w)
	bp := copyBufs.Get().(*[]byte)
	defer copyBufs.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return
			}
			if stream {
				if werr := rc.Flush(); werr != nil {
					return
				}
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				cancel()
			}
			return
		}
	}
}

// copyBufs are the relay's buffers, reused across requests as any proxy that cares does.
var copyBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (p *PDProxy) send(ctx context.Context, base *url.URL, path string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(base.String(), "/")+path, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return p.Client.Do(req)
}
