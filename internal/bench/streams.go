package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Memory per open stream: many streaming requests held open at once through a proxy (the frame
// server sends each its first chunk and then holds it until the client leaves), the proxy's
// resident memory read from /proc before and after. Each held stream costs the proxy a client
// connection and an upstream connection, so the count is bounded by the file descriptors a process
// may hold.

// streamMemory is what measureStreamMemory found.
type streamMemory struct {
	streams int
	// rssIdle, rssHalf and rssFull are the proxy's resident bytes with 0, streams/2 and streams open.
	rssIdle, rssHalf, rssFull int64
	measured                  bool // false in-process: the streams were held, nothing measured
}

// perStream is the marginal resident memory per stream: the growth from half the streams to all of
// them, so one-time growth (pools, the first buffers) does not count.
func (m streamMemory) perStream() float64 {
	half := m.streams - m.streams/2
	if half <= 0 {
		return 0
	}
	return float64(m.rssFull-m.rssHalf) / float64(half)
}

// holdBody asks the frame server to hold the stream open after its first chunk.
const holdBody = `{"model":"sim-model","messages":[{"role":"user","content":"hold"}],"max_tokens":16,"stream":true,"bench_hold":true}`

// maxHeldStreams is how many streams a proxy can hold with this process's file descriptor limit:
// two descriptors each (client and upstream connection), less a margin.
func maxHeldStreams() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil || lim.Max > 1<<20 {
		return 10000
	}
	return max(int(lim.Max)/2-256, 0)
}

// measureStreamMemory holds n streams open through t (fewer when descriptors run short) and reads
// its memory at 0, n/2 and n open streams; then closes them and waits until t has let go of them.
func measureStreamMemory(ctx context.Context, t *overheadTarget, n int, o ScenarioOptions) (streamMemory, error) {
	if c := maxHeldStreams(); n > c {
		fmt.Fprintf(o.Log, "overhead: %s: holding %d streams, not %d (file descriptor limit)\n", t.name, c, n)
		n = c
	}
	m := streamMemory{streams: n, measured: t.pids != nil}
	u, err := url.Parse(t.url)
	if err != nil {
		return m, err
	}
	rss := func() int64 {
		if t.pids == nil {
			return 0
		}
		return rssOf(t.pids())
	}
	m.rssIdle = rss()
	fds0 := 0
	if t.pids != nil {
		fds0 = fdsOf(t.pids())
	}
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	open := func(k int) error {
		got, err := openStreams(ctx, u.Host, k)
		conns = append(conns, got...)
		return err
	}
	if err := open(n / 2); err != nil {
		return m, err
	}
	m.rssHalf = rss()
	if err := open(n - n/2); err != nil {
		return m, err
	}
	m.rssFull = rss()
	for _, c := range conns {
		c.Close()
	}
	conns = nil
	if t.pids != nil {
		// The proxy must let go of every stream once its client has gone: wait for its descriptors.
		if err := waitFDsBelow(ctx, t.pids(), fds0+n/50+16, 30*time.Second); err != nil {
			return m, fmt.Errorf("after closing the streams: %w", err)
		}
	}
	return m, nil
}

// openStreams opens k held streams to addr, 64 at a time, each read up to its first data frame.
func openStreams(ctx context.Context, addr string, k int) ([]net.Conn, error) {
	req := []byte("POST /v1/chat/completions HTTP/1.1\r\nHost: " + addr + "\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(holdBody)) + "\r\n\r\n" + holdBody)
	conns := make([]net.Conn, k)
	errs := make([]error, k)
	var wg sync.WaitGroup
	next := make(chan int)
	for range min(64, k) {
		wg.Go(func() {
			buf := make([]byte, 4096)
			for i := range next {
				conns[i], errs[i] = openStream(ctx, addr, req, buf)
			}
		})
	}
	for i := range k {
		next <- i
	}
	close(next)
	wg.Wait()
	var out []net.Conn
	for _, c := range conns {
		if c != nil {
			out = append(out, c)
		}
	}
	return out, errors.Join(errs...)
}

var errNoFrame = errors.New("held stream: no 200 and first frame")

func openStream(ctx context.Context, addr string, req, buf []byte) (net.Conn, error) {
	d := net.Dialer{Timeout: 10 * time.Second}
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(req); err != nil {
		c.Close()
		return nil, err
	}
	got := 0
	for !bytes.Contains(buf[:got], []byte("\ndata: ")) {
		if got == len(buf) {
			c.Close()
			return nil, errNoFrame
		}
		n, err := c.Read(buf[got:])
		got += n
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: %w: %q", errNoFrame, err, buf[:min(got, 200)])
		}
	}
	if !bytes.HasPrefix(buf[:got], []byte("HTTP/1.1 200")) {
		c.Close()
		return nil, fmt.Errorf("%w: %q", errNoFrame, buf[:min(got, 200)])
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// rssOf sums the resident memory (VmRSS) of pids, in bytes.
func rssOf(pids []int) int64 {
	var total int64
	for _, p := range pids {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(p) + "/status")
		if err != nil {
			continue
		}
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
				f := strings.Fields(v)
				if len(f) > 0 {
					kb, _ := strconv.ParseInt(f[0], 10, 64)
					total += kb << 10
				}
			}
		}
	}
	return total
}

// fdsOf counts the open file descriptors of pids.
func fdsOf(pids []int) int {
	n := 0
	for _, p := range pids {
		if es, err := os.ReadDir("/proc/" + strconv.Itoa(p) + "/fd"); err == nil {
			n += len(es)
		}
	}
	return n
}

// waitFDsBelow polls until pids hold fewer than limit descriptors in all, or the timeout.
func waitFDsBelow(ctx context.Context, pids []int, limit int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		n := fdsOf(pids)
		if n < limit {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d descriptors still open after %s", n, timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
