package dispatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"

	"github.com/sluicegw/sluice/internal/backend/body"
)

// Merging the answers of the single-sample requests of a split n > 1 request (pd_sglang.go) into
// the answer one engine gives for n samples; the JSON rewriting itself is backend's.

// mergeUnarySamples reads every sample's answer, releases everything, and answers the merged JSON.
func mergeUnarySamples(br *body.Request, resps []*Response, cancel context.CancelFunc) (*Response, error) {
	bodies := make([][]byte, len(resps))
	var err error
	for k, r := range resps {
		b, rerr := io.ReadAll(io.LimitReader(r.Body, maxMergedBody))
		r.Body.Close()
		if rerr != nil && err == nil {
			err = &TransportError{Worker: r.Worker, Err: rerr}
		}
		bodies[k] = b
	}
	cancel()
	if err != nil {
		return nil, err
	}
	merged, merr := body.MergeSampleResponses(br.Route, bodies)
	if merr != nil {
		return nil, &UpstreamError{Worker: resps[0].Worker, Status: http.StatusBadGateway,
			Message: "the samples' answers could not be merged: " + merr.Error()}
	}
	out := *resps[0]
	out.Header = resps[0].Header.Clone()
	out.Header.Del("Content-Length")
	out.Body = io.NopCloser(bytes.NewReader(merged))
	out.length = int64(len(merged))
	return &out, nil
}

// sampleStream merges the SSE streams of the samples into one: each frame is relayed as soon as any
// sample sends it, rewritten by body.SampleStreamMerger (choice or batch index k, one id, usage
// held back); once every sample has ended, the merged usage chunk and one [DONE] follow. An error
// frame of a sample, or a sample's stream failing, ends the merged stream with that error and
// cancels the other samples.
//
// Concurrency: one pump goroutine per sample reads its stream and hands frames to Read over an
// unbuffered channel; Read runs on the relay's goroutine. The sampleStream owns the pumps: Close
// cancels the samples' context, waits for every pump, then closes the samples' bodies (which waits
// for their prefill legs and releases their guards).
type sampleStream struct {
	resps  []*Response
	cancel context.CancelFunc
	frames chan sampleFrame
	quit   chan struct{}
	wg     sync.WaitGroup
	merger *body.SampleStreamMerger

	live  int // samples whose stream has not ended
	buf   []byte
	off   int
	ended bool
	err   error
	once  sync.Once
}

// sampleFrame is one event of sample k: a payload, its end, or its failure.
type sampleFrame struct {
	k    int
	data []byte
	end  bool
	err  error
}

// newSampleStream starts the pumps; the returned Response owns them.
func newSampleStream(br *body.Request, resps []*Response, cancel context.CancelFunc) *Response {
	s := &sampleStream{
		resps: resps, cancel: cancel, merger: body.NewSampleStreamMerger(br.Route),
		frames: make(chan sampleFrame), quit: make(chan struct{}), live: len(resps),
	}
	for k, r := range resps {
		s.wg.Go(func() { s.pump(k, r.Body) })
	}
	out := *resps[0]
	out.Header = resps[0].Header.Clone()
	out.Header.Set("Content-Type", "text/event-stream")
	out.Stream = true
	out.Body = s
	out.length = -1
	return &out
}

func (s *sampleStream) pump(k int, src io.Reader) {
	rd := body.NewSSEReader(src)
	for {
		data, err := rd.Next()
		f := sampleFrame{k: k}
		switch {
		case errors.Is(err, io.EOF):
			f.end = true
		case err != nil:
			f.err = err
		default:
			f.data = bytes.Clone(data)
		}
		select {
		case s.frames <- f:
		case <-s.quit:
			return
		}
		if f.end || f.err != nil {
			return
		}
	}
}

func (s *sampleStream) Read(p []byte) (int, error) {
	for s.off == len(s.buf) {
		switch {
		case s.err != nil:
			return 0, s.err
		case s.ended:
			return 0, io.EOF
		case s.live == 0:
			s.finish(nil)
			continue
		}
		f := <-s.frames
		switch {
		case f.err != nil:
			s.err = fmt.Errorf("sample %d: %w", f.k, f.err)
			s.cancel()
		case f.end:
			s.live--
		default:
			out, err := s.merger.Frame(f.k, f.data)
			switch {
			case err != nil:
				s.err = fmt.Errorf("sample %d: %w", f.k, err)
				s.cancel()
			case out == nil:
			case body.IsErrorFrame(out):
				s.finish(out)
				s.cancel()
			default:
				s.buf = body.AppendSSE(s.buf[:0], out)
				s.off = 0
			}
		}
	}
	n := copy(p, s.buf[s.off:])
	s.off += n
	return n, nil
}

// finish queues the end of the merged stream: the error frame that ended it, or the merged usage,
// then [DONE].
func (s *sampleStream) finish(errFrame []byte) {
	s.buf, s.off, s.ended = s.buf[:0], 0, true
	if errFrame != nil {
		s.buf = body.AppendSSE(s.buf, errFrame)
	} else if u, err := s.merger.UsageFrame(); err == nil && u != nil {
		s.buf = body.AppendSSE(s.buf, u)
	}
	s.buf = body.AppendSSE(s.buf, []byte("[DONE]"))
}

func (s *sampleStream) Close() error {
	s.once.Do(func() {
		s.cancel()
		close(s.quit)
		s.wg.Wait()
		for _, r := range s.resps {
			r.Body.Close()
		}
	})
	return nil
}
