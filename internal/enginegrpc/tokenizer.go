package enginegrpc

import (
	"archive/zip"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"google.golang.org/grpc"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
	"github.com/sluicegw/sluice/internal/tokenizer"
)

// ErrTokenizerChecksum means an engine's tokenizer bundle does not match the SHA-256 it sent with it
// (or sent none): it was damaged on the way, or the engine is broken, and is not used.
var ErrTokenizerChecksum = errors.New("tokenizer bundle does not match its SHA-256")

// MaxTokenizerBundle bounds a tokenizer bundle, compressed and unpacked: the largest tokenizers
// (Gemma's tokenizer.json is 33 MB) fit many times over, and a broken engine cannot exhaust memory.
const MaxTokenizerBundle = 256 << 20

// TokenizerBundle is an engine's tokenizer as GetTokenizer streams it: a zip of the model
// directory's tokenizer files (smg grpc_servicer/smg_grpc_servicer/tokenizer_bundle.py), verified.
type TokenizerBundle struct {
	Zip []byte
	// SHA256 is the archive's digest, lowercase hex: the same bundle from two workers is one tokenizer.
	SHA256 string
}

// GetTokenizer pulls the tokenizer bundle of the engine behind conn, which speaks protocol p: the
// stream's chunks concatenated, checked against the SHA-256 the last chunk carries
// (ErrTokenizerChecksum when it differs or is missing). Errors of the call are its gRPC status,
// wrapped with the protocol's name.
func GetTokenizer(ctx context.Context, conn grpc.ClientConnInterface, p Protocol) (TokenizerBundle, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel() // ends the stream when it is abandoned part way
	type chunks interface {
		Recv() (*smgcommonpb.GetTokenizerChunk, error)
	}
	var stream chunks
	var err error
	req := &smgcommonpb.GetTokenizerRequest{}
	switch p {
	case SGLang:
		stream, err = sglangpb.NewSglangSchedulerClient(conn).GetTokenizer(ctx, req)
	case VLLM:
		stream, err = vllmpb.NewVllmEngineClient(conn).GetTokenizer(ctx, req)
	case TRTLLM:
		stream, err = trtllmpb.NewTrtllmServiceClient(conn).GetTokenizer(ctx, req)
	default:
		return TokenizerBundle{}, fmt.Errorf("unknown engine gRPC protocol %q", p)
	}
	if err != nil {
		return TokenizerBundle{}, fmt.Errorf("%s GetTokenizer: %w", p, err)
	}
	var data []byte
	var sum string
	for {
		c, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return TokenizerBundle{}, fmt.Errorf("%s GetTokenizer: %w", p, err)
		}
		if len(data)+len(c.GetData()) > MaxTokenizerBundle {
			return TokenizerBundle{}, fmt.Errorf("%s GetTokenizer: bundle larger than %d bytes", p, MaxTokenizerBundle)
		}
		data = append(data, c.GetData()...)
		if c.GetSha256() != "" {
			sum = c.GetSha256()
		}
	}
	got := sha256.Sum256(data)
	if sum == "" {
		return TokenizerBundle{}, fmt.Errorf("%w: the engine sent none (%d bytes)", ErrTokenizerChecksum, len(data))
	}
	if !strings.EqualFold(sum, hex.EncodeToString(got[:])) {
		return TokenizerBundle{}, fmt.Errorf("%w: the engine sent %s, the %d bytes received hash to %x", ErrTokenizerChecksum, sum, len(data), got)
	}
	return TokenizerBundle{Zip: data, SHA256: hex.EncodeToString(got[:])}, nil
}

// Load unpacks the bundle into a temporary directory, loads the tokenizer from it as --tokenizer-path
// would (tokenizer.Load), and removes the directory. Only the archive's top-level regular files are
// written, under their base names: an entry naming a path outside (or a directory) is refused.
func (b TokenizerBundle) Load() (*tokenizer.Tokenizer, error) {
	zr, err := zip.NewReader(bytes.NewReader(b.Zip), int64(len(b.Zip)))
	if err != nil {
		return nil, fmt.Errorf("tokenizer bundle: %w", err)
	}
	dir, err := os.MkdirTemp("", "sluice-tokenizer-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	budget := int64(MaxTokenizerBundle)
	for _, f := range zr.File {
		if f.FileInfo().IsDir() {
			continue
		}
		name := f.Name
		if name != path.Base(name) || name == "." || name == ".." || strings.ContainsAny(name, `/\`) || !f.Mode().IsRegular() {
			return nil, fmt.Errorf("tokenizer bundle: entry %q is not a top-level file", name)
		}
		n, err := unpack(f, filepath.Join(dir, name), budget)
		if err != nil {
			return nil, fmt.Errorf("tokenizer bundle: %s: %w", name, err)
		}
		budget -= n
	}
	return tokenizer.Load(dir)
}

// unpack writes one zip entry to dst, at most budget bytes.
func unpack(f *zip.File, dst string, budget int64) (int64, error) {
	r, err := f.Open()
	if err != nil {
		return 0, err
	}
	defer r.Close()
	w, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return 0, err
	}
	n, err := io.Copy(w, io.LimitReader(r, budget+1))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > budget {
		err = fmt.Errorf("unpacks to more than %d bytes", MaxTokenizerBundle)
	}
	return n, err
}
