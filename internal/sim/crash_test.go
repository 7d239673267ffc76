package sim

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestCrash: a crashed engine drops the stream it was writing (the client reads an error, no [DONE]),
// refuses dials while it is down, and answers again on the same port after the restart.
func TestCrash(t *testing.T) {
	t.Parallel()
	e := startEngine(t, Config{ITLBase: 20 * time.Millisecond})
	c := testClient(t)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, e.URL()+"/v1/chat/completions",
		strings.NewReader(`{"messages":[{"role":"user","content":"hi"}],"max_tokens":500,"stream":true}`))
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	br := bufio.NewReader(resp.Body)
	if _, err := br.ReadString('\n'); err != nil { // the stream has started
		t.Fatal(err)
	}
	// Through the fault API, as a sluice-sim process is crashed: the answer comes before the crash.
	ctl := testClient(t)
	setFaults(t, ctl, e, `{"crash_for_ms":300}`)
	rest, err := io.ReadAll(br)
	if err == nil || strings.Contains(string(rest), "[DONE]") {
		t.Fatalf("the stream of a crashed engine ended cleanly (err %v, %d bytes)", err, len(rest))
	}
	if e.Crashes() != 1 {
		t.Errorf("Crashes() = %d, want 1", e.Crashes())
	}
	if conn, err := net.DialTimeout("tcp", e.URL()[len("http://"):], time.Second); err == nil {
		conn.Close()
		// The restart may already have happened on a slow machine; only a dial refused before it is checked.
		t.Log("dial succeeded: the engine already restarted")
	}
	waitFor(t, "the engine listens again", func() bool {
		status, _ := getStatus(c, e.URL()+"/health")
		return status == http.StatusOK
	})
	if status, body := post(t, c, e.URL()+"/v1/chat/completions", chatBody); status != 200 {
		t.Fatalf("after the restart: %d %s", status, body)
	}
}

func getStatus(c *http.Client, url string) (int, error) {
	resp, err := c.Get(url)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, nil
}
