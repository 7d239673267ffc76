package enginerpc

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"connectrpc.com/connect"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/proto"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	"github.com/sluicegw/sluice/gen/sglang/grpc/scheduler/sglangpbconnect"
	"github.com/sluicegw/sluice/internal/benchcpu"
	"github.com/sluicegw/sluice/internal/enginegrpc"
)

// BenchmarkGenerateClient weighs the Generate client alone: the transport's own (genclient.go) against
// connect-go over the same net/http HTTP/2 client (what it used before) and grpc-go's ClientConn, on the same fake engine and the same hand
// decoder: one streamed Generate of 51 messages per op, read to the end. The fake engine's CPU is in
// both figures; the difference between them is the clients'.
func BenchmarkGenerateClient(b *testing.B) {
	url := startEngine(b, newFake(benchReply), enginegrpc.SGLang)
	addr := strings.TrimPrefix(url, "grpc://")
	mt := uint32(64)
	req := &sglangpb.GenerateRequest{RequestId: "r", Stream: true, Tokenized: &sglangpb.TokenizedInput{InputIds: make([]uint32, 24)},
		SamplingParams: &sglangpb.SamplingParams{Temperature: 1, TopP: 1, TopK: -1, MaxNewTokens: &mt}}
	want := len(benchReply) + 2 // a chunk per byte and the EOS's, then the Complete

	b.Run("connect", func(b *testing.B) {
		h2c := newH2CClient()
		b.Cleanup(h2c.CloseIdleConnections)
		c := connect.NewClient[sglangpb.GenerateRequest, wireEvent](h2c, "http://"+addr+sglangpbconnect.SglangSchedulerGenerateProcedure,
			clientOptions, connect.WithCodec(wireCodec{sglangLayout}))
		call := func() int {
			st, err := c.CallServerStream(context.Background(), connect.NewRequest(req))
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			n := 0
			for st.Receive() {
				n++
			}
			if err := st.Err(); err != nil {
				b.Fatal(err)
			}
			return n
		}
		benchClient(b, want, call)
	})

	b.Run("sluice", func(b *testing.B) {
		h2c := newH2CClient()
		b.Cleanup(h2c.CloseIdleConnections)
		g := newGenCaller(h2c, "http://"+addr, sglangpbconnect.SglangSchedulerGenerateProcedure, sglangLayout)
		b.Cleanup(func() { g.h2.closeIdle(true) })
		call := func() int {
			st, err := g.call(context.Background(), req)
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			n := 0
			for st.Receive() {
				n++
			}
			if err := st.Err(); err != nil {
				b.Fatal(err)
			}
			return n
		}
		benchClient(b, want, call)
	})

	b.Run("grpc-go", func(b *testing.B) {
		conn, err := grpc.NewClient("passthrough:///"+addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.ForceCodec(wireCodec{sglangLayout})))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = conn.Close() })
		desc := &grpc.StreamDesc{ServerStreams: true}
		call := func() int {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			st, err := conn.NewStream(ctx, desc, sglangpbconnect.SglangSchedulerGenerateProcedure)
			if err != nil {
				b.Fatal(err)
			}
			if err := st.SendMsg(req); err != nil {
				b.Fatal(err)
			}
			if err := st.CloseSend(); err != nil {
				b.Fatal(err)
			}
			n := 0
			for {
				var ev wireEvent
				err := st.RecvMsg(&ev)
				if errors.Is(err, io.EOF) {
					return n
				}
				if err != nil {
					b.Fatal(err)
				}
				n++
			}
		}
		benchClient(b, want, call)
	})
}

func benchClient(b *testing.B, want int, call func() int) {
	if n := call(); n != want { // also sets up the connection, as the gateway's pool keeps it
		b.Fatalf("%d messages, want %d", n, want)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := benchcpu.Now()
	for range b.N {
		if n := call(); n != want {
			b.Fatalf("%d messages, want %d", n, want)
		}
	}
	b.ReportMetric(float64(benchcpu.Now()-start)/float64(b.N), "cpu-ns/op")
}

var _ http.RoundTripper = (*Transport)(nil)

// wireEvent is the Generate stream's message type for connect: the event it decodes to.
type wireEvent struct{ ev event }

// wireCodec is the Generate client's codec: requests marshalled as connect's own proto codec does,
// responses decoded by hand (wireLayout). Named "proto", it speaks the same content type.
type wireCodec struct{ l *wireLayout }

func (wireCodec) Name() string { return "proto" }

func (wireCodec) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("enginerpc: cannot marshal %T", m)
	}
	return proto.Marshal(pm)
}

func (wireCodec) MarshalAppend(dst []byte, m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("enginerpc: cannot marshal %T", m)
	}
	return proto.MarshalOptions{}.MarshalAppend(dst, pm)
}

func (c wireCodec) Unmarshal(b []byte, m any) error {
	w, ok := m.(*wireEvent)
	if !ok {
		return fmt.Errorf("enginerpc: cannot unmarshal into %T", m)
	}
	return c.l.decode(b, &w.ev)
}
