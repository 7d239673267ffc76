package sim

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"connectrpc.com/connect"

	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
)

//go:embed bytetokenizer/*.json
var byteTokenizerFS embed.FS

// tokenizerBundleFiles are the files a tokenizer bundle takes from the model directory, as the
// servicers' build_tokenizer_zip does (smg-project/smg grpc_servicer/smg_grpc_servicer/
// tokenizer_bundle.py TOKENIZER_FILES; its *.jinja, *.tiktoken and *.model globs are left out).
var tokenizerBundleFiles = []string{
	"tokenizer.json", "tokenizer_config.json", "config.json", "generation_config.json",
	"special_tokens_map.json", "vocab.json", "merges.txt", "tokenizer.model", "tiktoken.model",
	"chat_template.json",
}

// tokenizerChunkSize is the servicers' CHUNK_SIZE: 64 KiB per GetTokenizerChunk.
const tokenizerChunkSize = 64 << 10

// tokenizerBundle is an engine's zip of its tokenizer files and the archive's SHA-256 (lowercase
// hex, as hashlib's hexdigest), built once.
type tokenizerBundle struct {
	once sync.Once
	data []byte
	sum  string
	err  error
}

func (g *grpcEngine) tokenizerBundle() ([]byte, string, error) {
	e, b := g.e, &g.tokenizer
	b.once.Do(func() {
		src := os.DirFS(e.cfg.TokenizerDir)
		if e.cfg.TokenizerDir == "" {
			src, _ = fs.Sub(byteTokenizerFS, "bytetokenizer")
		}
		b.data, b.err = zipTokenizer(src)
		s := sha256.Sum256(b.data)
		b.sum = hex.EncodeToString(s[:])
	})
	return b.data, b.sum, b.err
}

// zipTokenizer writes the bundle files src has into a zip, flat, with a fixed time so the same files
// always make the same archive (and SHA-256).
func zipTokenizer(src fs.FS) ([]byte, error) {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	n := 0
	for _, name := range tokenizerBundleFiles {
		data, err := fs.ReadFile(src, name)
		if err != nil {
			continue
		}
		w, err := zw.CreateHeader(&zip.FileHeader{Name: name, Method: zip.Deflate, Modified: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)})
		if err != nil {
			return nil, err
		}
		if _, err := w.Write(data); err != nil {
			return nil, err
		}
		n++
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	if n == 0 {
		return nil, errors.New("no tokenizer files found in the tokenizer directory")
	}
	return buf.Bytes(), nil
}

// streamTokenizer sends the bundle in 64 KiB chunks, the SHA-256 on the last one only, as the
// servicers' GetTokenizer does. A bundle that cannot be built is INTERNAL, as there. The
// CorruptTokenizer fault sends a digest that does not match.
func (g *grpcEngine) streamTokenizer(send func(*smgcommonpb.GetTokenizerChunk) error) error {
	data, sum, err := g.tokenizerBundle()
	if err != nil {
		return connect.NewError(connect.CodeInternal, err)
	}
	if g.e.tokenizerCorrupt() {
		sum = sum[len(sum)/2:] + sum[:len(sum)/2]
	}
	for off := 0; off < len(data); off += tokenizerChunkSize {
		end := min(off+tokenizerChunkSize, len(data))
		c := &smgcommonpb.GetTokenizerChunk{Data: data[off:end]}
		if end == len(data) {
			c.Sha256 = sum
		}
		if err := send(c); err != nil {
			return err
		}
	}
	return nil
}

// GetTokenizer streams the engine's tokenizer bundle (SGLang's servicer).
func (s sglangServicer) GetTokenizer(_ context.Context, _ *smgcommonpb.GetTokenizerRequest, stream *connect.ServerStream[smgcommonpb.GetTokenizerChunk]) error {
	return s.g.streamTokenizer(stream.Send)
}

// GetTokenizer streams the engine's tokenizer bundle (vLLM's servicer).
func (s vllmServicer) GetTokenizer(_ context.Context, _ *smgcommonpb.GetTokenizerRequest, stream *connect.ServerStream[smgcommonpb.GetTokenizerChunk]) error {
	return s.g.streamTokenizer(stream.Send)
}

func (e *Engine) tokenizerCorrupt() bool {
	f := e.faults.Load()
	return f.CorruptTokenizer && f.appliesTo(e.cfg.Role)
}

// WriteByteTokenizer writes the simulator's built-in byte-level tokenizer (ids 0-255 the UTF-8 bytes,
// ChatML's two added tokens and template: what --grpc-byte-token-ids engines answer in) into dir, for
// a gateway that needs the model's tokenizer in front of such engines (--tokenizer-path).
func WriteByteTokenizer(dir string) error {
	for _, name := range []string{"tokenizer.json", "tokenizer_config.json"} {
		b, err := byteTokenizerFS.ReadFile("bytetokenizer/" + name)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}
