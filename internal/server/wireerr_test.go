package server_test

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/server"
)

// rawExchange writes raw to a fresh connection to addr and reads one response. The read deadline only
// turns a hang into a failure: a short malformed request must be answered at once, long before the
// server's hour-long header timeout.
func rawExchange(t *testing.T, addr, raw string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("%q: no answer: %v", raw, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%q: reading the answer: %v", raw, err)
	}
	return resp, body
}

func TestNetHTTPErrorsAreJSON(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	addr := listen(t, ok, server.ListenOptions{MaxHeaderBytes: 1024, ReadHeaderTimeout: time.Hour})

	cases := []struct {
		name, raw  string
		status     int
		code, text string
	}{
		{"headers too large", "GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + strings.Repeat("a", 16<<10) + "\r\n\r\n",
			431, "request_header_fields_too_large", "exceed the gateway's limit of 1024 bytes"},
		{"malformed header line", "GET / HTTP/1.1\r\nHost: x\r\nno colon here\r\n\r\n",
			400, "malformed_request", "could not be parsed"},
		{"missing Host", "GET / HTTP/1.1\r\n\r\n", 400, "malformed_request", "missing required Host header"},
		{"HTTP/3.0 request line", "GET / HTTP/3.0\r\nHost: x\r\n\r\n", 505, "http_version_not_supported", "HTTP/1.1"},
		{"unsupported transfer coding", "POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n",
			501, "unsupported_transfer_encoding", "Transfer-Encoding"},
		// Shorter than h2c's preface peek: answered at once, not after the header timeout.
		{"short garbage", "hello\r\n\r\n", 400, "malformed_request", "could not be parsed"},
		{"request line without version", "GET /\r\n\r\n", 400, "malformed_request", "could not be parsed"},
		{"long garbage", "this is not an HTTP request at all\r\n\r\n", 400, "malformed_request", "could not be parsed"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := rawExchange(t, addr, tc.raw)
			if resp.StatusCode != tc.status {
				t.Errorf("status %d, want %d (body %s)", resp.StatusCode, tc.status, body)
			}
			if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("Content-Type %q, want application/json", ct)
			}
			var e struct {
				Error struct {
					Message, Type, Code string
				} `json:"error"`
			}
			if err := json.Unmarshal(body, &e); err != nil {
				t.Fatalf("body is not JSON: %q", body)
			}
			if e.Error.Code != tc.code || !strings.Contains(e.Error.Message, tc.text) || e.Error.Type == "" {
				t.Errorf("error %+v, want code %q and a message containing %q", e.Error, tc.code, tc.text)
			}
		})
	}
}

// The normal path is untouched: keep-alive requests, a handler's own plain-text 400 with Connection:
// close, and h2c with prior knowledge.
func TestWireErrConnLeavesNormalAnswersAlone(t *testing.T) {
	t.Parallel()
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/plain400" {
			w.Header().Set("Connection", "close")
			http.Error(w, "400 Bad Request", http.StatusBadRequest)
			return
		}
		_, _ = io.WriteString(w, "ok "+r.Proto)
	})
	addr := listen(t, h, server.ListenOptions{})

	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	for i, path := range []string{"/", "/", "/plain400"} {
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		want, wantCT := "ok HTTP/1.1", "text/plain; charset=utf-8"
		if path == "/plain400" {
			want = "400 Bad Request\n"
		}
		if string(body) != want || resp.Header.Get("Content-Type") != wantCT {
			t.Errorf("request %d: %q %q, want %q %q", i, resp.Header.Get("Content-Type"), body, wantCT, want)
		}
	}

	var p http.Protocols
	p.SetUnencryptedHTTP2(true)
	tr := &http.Transport{Protocols: &p}
	defer tr.CloseIdleConnections()
	resp, err := (&http.Client{Transport: tr}).Get("http://" + addr + "/")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "ok HTTP/2.0" {
		t.Errorf("h2c: %q, want ok HTTP/2.0", body)
	}
}
