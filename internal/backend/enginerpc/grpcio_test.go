package enginerpc

import (
	"bufio"
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/proto"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/internal/testkit/poll"
	"github.com/sluicegw/sluice/internal/testkit/python"
)

// The engines serve their scheduler protocol from Python on gRPC's C core (SGLang's grpc.aio server);
// the HTTP/2 client of our own was written against Go's servers. These tests run both Generate clients
// against testdata/grpcio_engine.py on Debian's python3-grpcio, which .ci/run installs.

// grpcioEngine is testdata/grpcio_engine.py running as a child process; lines has what it printed
// after READY (closed when it exits).
type grpcioEngine struct {
	base  string
	lines chan string
}

func startGRPCIOEngine(t *testing.T, args ...string) *grpcioEngine {
	t.Helper()
	cmd := exec.Command(python.Find(t, []string{"python3-grpcio"}, "grpc"), append([]string{"testdata/grpcio_engine.py"}, args...)...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	e := &grpcioEngine{lines: make(chan string, 1024)}
	done := make(chan struct{})
	go func() { // ends when the script's stdout closes, at its exit
		defer close(done)
		defer close(e.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(nil, 4<<20)
		for sc.Scan() {
			e.lines <- sc.Text()
		}
	}()
	t.Cleanup(func() {
		_ = stdin.Close() // the script exits at EOF
		<-done
		if err := cmd.Wait(); err != nil {
			t.Errorf("grpcio engine: %v", err)
		}
	})
	var port int
	if line := e.next(t); func() error { _, err := fmt.Sscanf(line, "READY %d", &port); return err }() != nil {
		t.Fatalf("grpcio engine said %q", line)
	}
	e.base = fmt.Sprintf("http://127.0.0.1:%d", port)
	return e
}

// next is the script's next line, waiting at most 20 s.
func (e *grpcioEngine) next(t *testing.T) string {
	t.Helper()
	select {
	case l, ok := <-e.lines:
		if !ok {
			t.Fatal("the grpcio engine exited")
		}
		return l
	case <-time.After(20 * time.Second):
		t.Fatal("the grpcio engine said nothing for 20 s")
	}
	return ""
}

// caller is a Generate client of e; own picks the client of our own, else net/http's.
func (e *grpcioEngine) caller(t *testing.T, own bool) (genCaller, *atomic.Int32) {
	hc := newH2CClient()
	g := newGenCaller(hc, e.base, "/sglang.grpc.scheduler.SglangScheduler/Generate", sglangLayout)
	var dials atomic.Int32
	if own {
		g.h2.dialer.ControlContext = func(context.Context, string, string, syscall.RawConn) error {
			dials.Add(1)
			return nil
		}
	} else {
		g.h2 = nil
	}
	t.Cleanup(func() {
		hc.CloseIdleConnections()
		if g.h2 != nil {
			g.h2.closeIdle(true)
		}
	})
	return g, &dials
}

// TestGenCallerAgainstGRPCIO: against grpcio, the request arrives byte for byte as proto.Marshal writes
// it (also one larger than the engine's flow-control windows), an answer larger than the client's
// stream window arrives whole, an engine's status is its code and message, a cancelled call reaches
// the engine as a cancellation, concurrent calls all complete, and calls one after the other share
// one connection.
func TestGenCallerAgainstGRPCIO(t *testing.T) {
	e := startGRPCIOEngine(t)
	bothClients(t, func(t *testing.T, own bool) {
		g, dials := e.caller(t, own)
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()

		maxNew := uint32(16)
		req := &sglangpb.GenerateRequest{RequestId: "echo", Stream: true,
			Tokenized:      &sglangpb.TokenizedInput{OriginalText: "héllo", InputIds: []uint32{9, 300, 70000}},
			SamplingParams: &sglangpb.SamplingParams{Temperature: 0.5, TopK: 4, MaxNewTokens: &maxNew, Stop: []string{"\n"}}}
		for range 3 {
			st, err := g.call(ctx, req)
			if err != nil {
				t.Fatal(err)
			}
			ids, err := drain(st)
			if err != nil || len(ids) != 1 || fmt.Sprint(ids[0]) != "[1 2 3]" {
				t.Fatalf("echo: %v, %v; want one chunk [1 2 3] and a clean end", ids, err)
			}
			want, _ := proto.Marshal(req)
			if got := e.next(t); got != "REQ echo "+hex.EncodeToString(want) {
				t.Fatalf("the engine read %q, want the request %x", got, want)
			}
		}
		if own && dials.Load() != 1 {
			t.Errorf("3 calls one after the other dialed %d connections, want 1", dials.Load())
		}

		big := make([]uint32, 40000) // ~120 kB: past grpcio's 64 kB initial windows
		for i := range big {
			big[i] = uint32(100000 + i)
		}
		st, err := g.call(ctx, &sglangpb.GenerateRequest{RequestId: "many:2000,10000", Tokenized: &sglangpb.TokenizedInput{InputIds: big}})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := drain(st) // 20 MB: past the client's 16 MiB stream window
		if err != nil || len(ids) != 2000 {
			t.Fatalf("large exchange: %d messages, %v; want 2000", len(ids), err)
		}
		for i, c := range ids {
			if len(c) != 1 || c[0] != uint32(i) {
				t.Fatalf("message %d carries %v", i, c)
			}
		}

		st, err = g.call(ctx, &sglangpb.GenerateRequest{RequestId: "abort"})
		if err == nil {
			ids, err = drain(st)
		}
		if connect.CodeOf(err) != connect.CodeResourceExhausted || !connect.IsWireError(err) || !strings.Contains(err.Error(), "engine busy") || len(ids) != 1 {
			t.Fatalf("abort: %d messages, %v; want one and the engine's RESOURCE_EXHAUSTED", len(ids), err)
		}

		hctx, hcancel := context.WithCancel(ctx)
		id := fmt.Sprintf("hang:%v", own)
		st, err = g.call(hctx, &sglangpb.GenerateRequest{RequestId: id})
		if err != nil {
			t.Fatal(err)
		}
		if !st.Receive() {
			t.Fatalf("hang: no first message: %v", st.Err())
		}
		hcancel()
		if st.Receive() || connect.CodeOf(st.Err()) != connect.CodeCanceled {
			t.Errorf("after cancel: %v, want Canceled", st.Err())
		}
		st.Close()
		if got := e.next(t); got != "ENDED "+id {
			t.Fatalf("the engine said %q, want it to see the cancellation", got)
		}

		var wg sync.WaitGroup
		errs := make(chan error, 16)
		for k := range 16 {
			wg.Go(func() {
				st, err := g.call(ctx, &sglangpb.GenerateRequest{RequestId: fmt.Sprintf("many:%d,100", 50+k)})
				if err != nil {
					errs <- err
					return
				}
				ids, err := drain(st)
				if err == nil && len(ids) != 50+k {
					err = fmt.Errorf("call %d: %d messages", k, len(ids))
				}
				if err != nil {
					errs <- err
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
	})
}

// TestGenCallerKeepsPingedConnectionsWithGRPCIO: grpcio with a keepalive pings the idle connection;
// it is answered when next taken and kept, and the engine, whose pings are answered, does not close it.
func TestGenCallerKeepsPingedConnectionsWithGRPCIO(t *testing.T) {
	e := startGRPCIOEngine(t, "50")
	g, dials := e.caller(t, true)
	call := func() {
		t.Helper()
		st, err := g.call(context.Background(), &sglangpb.GenerateRequest{RequestId: "many:3,0"})
		if err != nil {
			t.Fatal(err)
		}
		if ids, err := drain(st); err != nil || len(ids) != 3 {
			t.Fatalf("%d messages, %v", len(ids), err)
		}
	}
	call()
	g.h2.mu.Lock()
	idle := g.h2.idle[0]
	g.h2.mu.Unlock()
	poll.Until(t, "the engine's ping on the idle connection", 10*time.Second, func() bool {
		_, pending := peekConn(idle.nc)
		return pending
	})
	for range 5 {
		call()
	}
	if got := dials.Load(); got != 1 {
		t.Fatalf("%d connections dialed: a pinged connection was replaced", got)
	}
}
