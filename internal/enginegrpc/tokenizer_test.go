package enginegrpc

import (
	"archive/zip"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// fakeVLLMTokenizer streams chunks as GetTokenizer's answer.
type fakeVLLMTokenizer struct {
	vllmpb.UnimplementedVllmEngineServer
	chunks []*smgcommonpb.GetTokenizerChunk
}

func (f fakeVLLMTokenizer) GetTokenizer(_ *smgcommonpb.GetTokenizerRequest, s grpc.ServerStreamingServer[smgcommonpb.GetTokenizerChunk]) error {
	for _, c := range f.chunks {
		if err := s.Send(c); err != nil {
			return err
		}
	}
	return nil
}

// zipOf makes a bundle of the named files.
func zipOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	for name, body := range files {
		w, err := zw.Create(name)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// A minimal byte-level BPE tokenizer.json (ids 0-255 for the printable-mapped bytes).
func byteTokenizerJSON(t *testing.T) string {
	t.Helper()
	vocab := map[string]int{}
	n := 0
	for c := range 256 {
		r := rune(c)
		if printable := c >= '!' && c <= '~' || c >= 0xA1 && c <= 0xAC || c >= 0xAE; !printable {
			r = rune(256 + n)
			n++
		}
		vocab[string(r)] = c
	}
	b, err := json.Marshal(map[string]any{
		"pre_tokenizer": map[string]any{"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
		"decoder":       map[string]any{"type": "ByteLevel"},
		"model":         map[string]any{"type": "BPE", "vocab": vocab, "merges": [][2]string{}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// chunked splits data into chunks of size n, the digest on the last one.
func chunked(data []byte, n int, sum string) []*smgcommonpb.GetTokenizerChunk {
	var out []*smgcommonpb.GetTokenizerChunk
	for off := 0; off < len(data); off += n {
		out = append(out, &smgcommonpb.GetTokenizerChunk{Data: data[off:min(off+n, len(data))]})
	}
	out[len(out)-1].Sha256 = sum
	return out
}

func hexSum(b []byte) string { s := sha256.Sum256(b); return hex.EncodeToString(s[:]) }

// GetTokenizer concatenates the streamed chunks, checks them against the last chunk's SHA-256, and
// the bundle loads as a tokenizer directory would.
func TestGetTokenizer(t *testing.T) {
	bundle := zipOf(t, map[string]string{"tokenizer.json": byteTokenizerJSON(t), "tokenizer_config.json": `{"eos_token": "x"}`})
	tests := []struct {
		name    string
		chunks  []*smgcommonpb.GetTokenizerChunk
		wantErr error
	}{
		{"several chunks", chunked(bundle, 1000, hexSum(bundle)), nil},
		{"uppercase digest", chunked(bundle, 1<<20, strings.ToUpper(hexSum(bundle))), nil},
		{"digest of other bytes", chunked(bundle, 1000, hexSum(bundle[1:])), ErrTokenizerChecksum},
		{"no digest", chunked(bundle, 1000, ""), ErrTokenizerChecksum},
		{"a chunk lost", chunked(bundle, 1000, hexSum(bundle))[1:], ErrTokenizerChecksum},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn, _ := serve(t, func(s *grpc.Server) { vllmpb.RegisterVllmEngineServer(s, fakeVLLMTokenizer{chunks: tt.chunks}) })
			b, err := GetTokenizer(testContext(t), conn, VLLM)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("GetTokenizer: %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(b.Zip, bundle) || b.SHA256 != hexSum(bundle) {
				t.Fatalf("bundle of %d bytes, sha %s; want the %d sent, %s", len(b.Zip), b.SHA256, len(bundle), hexSum(bundle))
			}
			tk, err := b.Load()
			if err != nil {
				t.Fatal(err)
			}
			if ids := tk.Encode("hi!"); len(ids) != 3 || ids[0] != 'h' || ids[2] != '!' {
				t.Errorf("Encode(hi!) = %v, want the bytes", ids)
			}
		})
	}
}

// An engine without the call answers UNIMPLEMENTED, which GetTokenizer passes on.
func TestGetTokenizerUnimplemented(t *testing.T) {
	conn, _ := serve(t, func(s *grpc.Server) { vllmpb.RegisterVllmEngineServer(s, fakeVLLM{info: vllmInfo}) })
	if _, err := GetTokenizer(testContext(t), conn, VLLM); status.Code(err) != codes.Unimplemented {
		t.Fatalf("GetTokenizer: %v, want UNIMPLEMENTED", err)
	}
}

// Only the archive's top-level files are unpacked: an entry that names a path is refused, as is a
// bundle without tokenizer.json.
func TestTokenizerBundleLoadRefuses(t *testing.T) {
	for name, files := range map[string]map[string]string{
		"parent path":       {"../tokenizer.json": byteTokenizerJSON(t)},
		"nested path":       {"sub/tokenizer.json": byteTokenizerJSON(t)},
		"no tokenizer.json": {"config.json": "{}"},
	} {
		t.Run(name, func(t *testing.T) {
			z := zipOf(t, files)
			if _, err := (TokenizerBundle{Zip: z, SHA256: hexSum(z)}).Load(); err == nil {
				t.Fatal("Load succeeded")
			}
		})
	}
	if _, err := (TokenizerBundle{Zip: []byte("not a zip")}).Load(); err == nil {
		t.Fatal("Load of a non-zip succeeded")
	}
}
