package kvevents_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/sluicegw/sluice/internal/kvevents"
)

func pack(t testing.TB, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDecodeBatch(t *testing.T) {
	t.Parallel()
	stored := kvevents.Event{
		Kind: kvevents.BlockStored, BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1), kvevents.IntHash(2)},
		Parent: kvevents.BytesHash([]byte{0xab}), HasParent: true, TokenIDs: []uint32{1, 2, 3, 4}, BlockSize: 2, Medium: "CPU",
	}
	tests := []struct {
		name    string
		payload any
		want    *kvevents.Batch
		wantErr string
	}{
		{
			name: "array_like (SGLang, older vLLM)",
			payload: []any{1.5, []any{
				[]any{"BlockStored", []any{1, 2}, []byte{0xab}, []any{1, 2, 3, 4}, 2, nil, "CPU", nil, []any{nil, nil}, 0},
				[]any{"BlockRemoved", []any{uint64(1<<64 - 1)}},
				[]any{"AllBlocksCleared"},
			}, 3},
			want: &kvevents.Batch{TS: 1.5, DPRank: 3, HasRank: true, Events: []kvevents.Event{
				stored,
				{Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1<<64 - 1)}},
				{Kind: kvevents.AllBlocksCleared},
			}},
		},
		{
			name:    "array_like without rank (omit_defaults)",
			payload: []any{2.0, []any{}},
			want:    &kvevents.Batch{TS: 2, Events: []kvevents.Event{}},
		},
		{
			name: "map (current vLLM), unknown fields skipped",
			payload: map[string]any{"ts": 1.5, "data_parallel_rank": 3, "future": "x", "events": []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{1, 2}, "parent_block_hash": []byte{0xab},
					"token_ids": []any{1, 2, 3, 4}, "block_size": 2, "lora_id": nil, "medium": "CPU", "lora_name": nil,
					"group_idx": 0, "kv_cache_spec_kind": "full_attention"},
			}},
			want: &kvevents.Batch{TS: 1.5, DPRank: 3, HasRank: true, Events: []kvevents.Event{stored}},
		},
		{
			name: "SGLang attn_dp_rank, negative int hash, LoRA",
			payload: map[string]any{"ts": 0.0, "attn_dp_rank": 1, "events": []any{
				map[string]any{"type": "BlockStored", "block_hashes": []any{-5}, "parent_block_hash": nil,
					"token_ids": []any{7}, "block_size": 1, "lora_id": 4},
			}},
			want: &kvevents.Batch{DPRank: 1, HasRank: true, Events: []kvevents.Event{{
				Kind: kvevents.BlockStored, BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1<<64 - 5)},
				TokenIDs: []uint32{7}, BlockSize: 1, LoRA: true,
			}}},
		},
		{
			name:    "integer medium: an unknown tier, not an error",
			payload: []any{1.0, []any{[]any{"BlockRemoved", []any{1}, 2}}},
			want: &kvevents.Batch{TS: 1, Events: []kvevents.Event{{
				Kind: kvevents.BlockRemoved, BlockHashes: []kvevents.EngineHash{kvevents.IntHash(1)}, Medium: "medium:2",
			}}},
		},
		{name: "not a batch", payload: "text", wantErr: "decoding array length"},
		{name: "short batch", payload: []any{1.0}, wantErr: "batch array of 1"},
		{name: "unknown tag", payload: []any{1.0, []any{[]any{"BlockMoved"}}}, wantErr: "unknown event tag"},
		{name: "map event without type", payload: []any{1.0, []any{map[string]any{"block_hashes": []any{}}}}, wantErr: `no "type"`},
		{name: "token count mismatch", payload: []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{1, 2, 3}, 2, nil}}}, wantErr: "3 token ids for 1 blocks of 2"},
		{name: "zero block size", payload: []any{1.0, []any{[]any{"BlockStored", []any{}, nil, []any{}, 0, nil}}}, wantErr: "block_size 0"},
		{name: "negative token", payload: []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{-1}, 1, nil}}}, wantErr: "out of range"},
		{name: "bigram tokens", payload: []any{1.0, []any{[]any{"BlockStored", []any{1}, nil, []any{[]any{1, 2}}, 1, nil}}}, wantErr: "token 0"},
		{name: "ts not a number", payload: []any{"now", []any{}}, wantErr: "ts"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			got, err := kvevents.DecodeBatch(pack(t, tc.payload))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, kvevents.ErrMalformed) {
					t.Fatalf("err = %v, want ErrMalformed containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("batch (-want +got):\n%s", d)
			}
		})
	}
}

func TestDecodeBatchTruncated(t *testing.T) {
	t.Parallel()
	full := pack(t, []any{1.0, []any{[]any{"BlockStored", []any{1, 2}, nil, []any{1, 2, 3, 4}, 2, nil, "GPU"}}, 0})
	for n := range len(full) - 1 {
		if _, err := kvevents.DecodeBatch(full[:n]); !errors.Is(err, kvevents.ErrMalformed) {
			t.Fatalf("payload cut at %d of %d: err = %v, want ErrMalformed", n, len(full), err)
		}
	}
}

func TestParseFrames(t *testing.T) {
	t.Parallel()
	seq, payload, err := kvevents.ParseFrames([][]byte{[]byte("t"), kvevents.SeqBytes(258), []byte("p")})
	if err != nil || seq != 258 || string(payload) != "p" {
		t.Errorf("ParseFrames = %d, %q, %v", seq, payload, err)
	}
	for _, frames := range [][][]byte{
		{[]byte("t"), kvevents.SeqBytes(1)},
		{nil, []byte{1, 2, 3}, nil},
		{nil, kvevents.SeqBytes(1), nil, nil},
	} {
		if _, _, err := kvevents.ParseFrames(frames); !errors.Is(err, kvevents.ErrMalformed) {
			t.Errorf("ParseFrames(%d frames) err = %v, want ErrMalformed", len(frames), err)
		}
	}
}

func FuzzDecodeBatch(f *testing.F) {
	f.Add([]byte{0x92, 0xcb, 0, 0, 0, 0, 0, 0, 0, 0, 0x90})
	f.Fuzz(func(t *testing.T, b []byte) {
		batch, err := kvevents.DecodeBatch(b)
		if err != nil {
			return
		}
		for _, ev := range batch.Events {
			if ev.Kind == kvevents.BlockStored && len(ev.TokenIDs) != len(ev.BlockHashes)*ev.BlockSize {
				t.Fatalf("decoded an inconsistent BlockStored: %+v", ev)
			}
		}
		idx, _ := kvevents.NewIndex(kvevents.IndexConfig{MaxBlocksPerWorker: 64})
		idx.Apply("w", 0, batch)
	})
}

// BenchmarkDecodeApply decodes and applies a typical step's batch: one BlockStored of 16 blocks of
// vLLM's block size 16 (a 256-token prefill), then its BlockRemoved, in the array_like encoding.
func BenchmarkDecodeApply(b *testing.B) {
	hashes := make([]any, 16)
	ids := make([]any, 256)
	for i := range hashes {
		hashes[i] = uint64(1<<40 + i)
	}
	for i := range ids {
		ids[i] = 1000 + i
	}
	stored := pack(b, []any{1.5, []any{[]any{"BlockStored", hashes, nil, ids, 16, nil, "GPU", nil}}, 0})
	removed := pack(b, []any{1.5, []any{[]any{"BlockRemoved", hashes, "GPU"}}, 0})
	idx := newIndex(b, kvevents.IndexConfig{})
	b.ReportAllocs()
	for b.Loop() {
		for _, p := range [][]byte{stored, removed} {
			batch, err := kvevents.DecodeBatch(p)
			if err != nil {
				b.Fatal(err)
			}
			idx.Apply("w", 0, batch)
		}
	}
}
