package enginegrpc

import (
	"fmt"
	"testing"

	"google.golang.org/protobuf/reflect/protoreflect"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	smgcommonpb "github.com/sluicegw/sluice/gen/smg/grpc/common"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// The tables at the end of this file are written from smg-project/smg crates/grpc_client/proto/
// {common,sglang_scheduler,vllm_engine,trtllm_service}.proto at commit
// f8daa8835a8b4419b53125a837aaab2b3ce895c3, independently of our .proto files. The tests compare them
// with the descriptors generated from proto/{smg,sglang,vllm,trtllm}: a renumbered, retyped, renamed,
// added or dropped field, enum value or RPC on our side fails here, because the engines would read
// it differently. Upstream's sglang "Future" messages (UpdateWeights*, Get/SetInternalState*) are
// carried by no RPC and are not in our files, so not in the table either.

// wireField is one field as upstream declares it.
type wireField struct {
	msg  protoreflect.FullName
	name protoreflect.Name
	num  protoreflect.FieldNumber
	// typ is the scalar kind ("uint32"), or a message or enum's full name, prefixed by "repeated " or
	// "optional " as declared; a map is "map<key,value>".
	typ string
	// oneof names the oneof the field belongs to, if any.
	oneof protoreflect.Name
}

type wireEnumValue struct {
	enum protoreflect.FullName
	name protoreflect.Name
	num  protoreflect.EnumNumber
}

type wireRPC struct {
	service       protoreflect.FullName
	method        protoreflect.Name
	input, output protoreflect.FullName
	serverStream  bool
}

var engineFiles = []protoreflect.FileDescriptor{
	smgcommonpb.File_smg_grpc_common_common_proto,
	sglangpb.File_sglang_grpc_scheduler_sglang_scheduler_proto,
	vllmpb.File_vllm_grpc_engine_vllm_engine_proto,
	trtllmpb.File_trtllm_trtllm_service_proto,
}

// kindName is a field's (or map key's or value's) type as a .proto file spells it.
func kindName(fd protoreflect.FieldDescriptor) string {
	switch fd.Kind() {
	case protoreflect.MessageKind, protoreflect.GroupKind:
		return string(fd.Message().FullName())
	case protoreflect.EnumKind:
		return string(fd.Enum().FullName())
	default:
		return fd.Kind().String()
	}
}

func describeField(fd protoreflect.FieldDescriptor) wireField {
	w := wireField{msg: fd.ContainingMessage().FullName(), name: fd.Name(), num: fd.Number()}
	switch {
	case fd.IsMap():
		w.typ = "map<" + kindName(fd.MapKey()) + "," + kindName(fd.MapValue()) + ">"
	case fd.IsList():
		w.typ = "repeated " + kindName(fd)
	case fd.HasOptionalKeyword():
		w.typ = "optional " + kindName(fd)
	default:
		w.typ = kindName(fd)
	}
	if od := fd.ContainingOneof(); od != nil && !od.IsSynthetic() {
		w.oneof = od.Name()
	}
	return w
}

// walk calls field for every field and enumValue for every enum value declared in the engines' files,
// nested declarations included (map entries are the map fields' own business).
func walk(field func(protoreflect.FieldDescriptor), enumValue func(protoreflect.EnumValueDescriptor)) {
	enums := func(es protoreflect.EnumDescriptors) {
		for i := range es.Len() {
			vs := es.Get(i).Values()
			for j := range vs.Len() {
				enumValue(vs.Get(j))
			}
		}
	}
	var messages func(ms protoreflect.MessageDescriptors)
	messages = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			md := ms.Get(i)
			if md.IsMapEntry() {
				continue
			}
			fs := md.Fields()
			for j := range fs.Len() {
				field(fs.Get(j))
			}
			enums(md.Enums())
			messages(md.Messages())
		}
	}
	for _, fd := range engineFiles {
		enums(fd.Enums())
		messages(fd.Messages())
	}
}

func TestFieldsMatchUpstream(t *testing.T) {
	ours := map[string]wireField{}
	walk(func(fd protoreflect.FieldDescriptor) {
		ours[string(fd.FullName())] = describeField(fd)
	}, func(protoreflect.EnumValueDescriptor) {})

	seen := map[string]bool{}
	for _, want := range upstreamFields {
		key := string(want.msg) + "." + string(want.name)
		if seen[key] {
			t.Errorf("table lists %s twice", key)
		}
		seen[key] = true
		got, ok := ours[key]
		if !ok {
			t.Errorf("%s (upstream field %d, %s) is missing from our .proto", key, want.num, want.typ)
			continue
		}
		if got != want {
			t.Errorf("%s: ours is %s, upstream's is %s", key, fieldString(got), fieldString(want))
		}
	}
	for key, got := range ours {
		if !seen[key] {
			t.Errorf("%s (%s) is ours only: upstream has no such field", key, fieldString(got))
		}
	}
}

func fieldString(w wireField) string {
	s := fmt.Sprintf("%s = %d", w.typ, w.num)
	if w.oneof != "" {
		s += " in oneof " + string(w.oneof)
	}
	return s
}

func TestEnumValuesMatchUpstream(t *testing.T) {
	ours := map[protoreflect.FullName]wireEnumValue{}
	walk(func(protoreflect.FieldDescriptor) {}, func(vd protoreflect.EnumValueDescriptor) {
		enum := vd.Parent().FullName()
		ours[enum.Append(vd.Name())] = wireEnumValue{enum: enum, name: vd.Name(), num: vd.Number()}
	})
	seen := map[protoreflect.FullName]bool{}
	for _, want := range upstreamEnumValues {
		key := want.enum.Append(want.name)
		seen[key] = true
		if got, ok := ours[key]; !ok {
			t.Errorf("enum value %s = %d is missing from our .proto", key, want.num)
		} else if got != want {
			t.Errorf("enum value %s: ours is %d, upstream's is %d", key, got.num, want.num)
		}
	}
	for key := range ours {
		if !seen[key] {
			t.Errorf("enum value %s is ours only", key)
		}
	}
}

// TestRPCsMatchUpstream pins the method paths (/package.Service/Method) and their message types.
func TestRPCsMatchUpstream(t *testing.T) {
	ours := map[string]wireRPC{}
	for _, fd := range engineFiles {
		ss := fd.Services()
		for i := range ss.Len() {
			ms := ss.Get(i).Methods()
			for j := range ms.Len() {
				m := ms.Get(j)
				if m.IsStreamingClient() {
					t.Errorf("%s is client-streaming; no upstream RPC is", m.FullName())
				}
				ours[string(m.FullName())] = wireRPC{
					service: m.Parent().FullName(), method: m.Name(),
					input: m.Input().FullName(), output: m.Output().FullName(),
					serverStream: m.IsStreamingServer(),
				}
			}
		}
	}
	seen := map[string]bool{}
	for _, want := range upstreamRPCs {
		key := string(want.service) + "." + string(want.method)
		seen[key] = true
		if got, ok := ours[key]; !ok {
			t.Errorf("RPC %s is missing from our .proto", key)
		} else if got != want {
			t.Errorf("RPC %s: ours is %+v, upstream's is %+v", key, got, want)
		}
	}
	for key := range ours {
		if !seen[key] {
			t.Errorf("RPC %s is ours only", key)
		}
	}
}

// TestTableCoversWhatTheGatewayUses guards the table itself: the messages the gateway sends or reads
// must be in it, so that a careless edit of the table cannot drop them from the comparison.
func TestTableCoversWhatTheGatewayUses(t *testing.T) {
	inTable := map[protoreflect.FullName]bool{}
	for _, f := range upstreamFields {
		inTable[f.msg] = true
	}
	for _, pkg := range []string{"sglang.grpc.scheduler", "vllm.grpc.engine", "trtllm"} {
		for _, msg := range []string{
			"GenerateRequest", "GenerateResponse", "GenerateStreamChunk", "GenerateComplete",
			"TokenizedInput", "GetModelInfoResponse", "GetServerInfoResponse", "HealthCheckResponse",
			"AbortRequest", "EmbedRequest", "EmbedResponse",
		} {
			if name := protoreflect.FullName(pkg + "." + msg); !inTable[name] {
				t.Errorf("the table lacks %s", name)
			}
		}
	}
	for _, name := range []protoreflect.FullName{
		"sglang.grpc.scheduler.SamplingParams", "sglang.grpc.scheduler.DisaggregatedParams",
		"sglang.grpc.scheduler.OutputLogProbs", "sglang.grpc.scheduler.InputLogProbs",
		"sglang.grpc.scheduler.TopLogProbs", "sglang.grpc.scheduler.AbortResponse",
		"sglang.grpc.scheduler.GetLoadsRequest", "sglang.grpc.scheduler.GetLoadsResponse",
		"sglang.grpc.scheduler.SchedulerLoad", "sglang.grpc.scheduler.DisaggregationMetrics",
		"vllm.grpc.engine.SamplingParams", "vllm.grpc.engine.KvTransferParams",
		"vllm.grpc.engine.OutputLogProbs", "vllm.grpc.engine.InputLogProbs",
		"vllm.grpc.engine.GetLoadsRequest", "vllm.grpc.engine.GetLoadsResponse",
		"vllm.grpc.engine.SchedulerLoad",
		"trtllm.SamplingConfig", "trtllm.OutputConfig", "trtllm.GuidedDecodingParams",
		"trtllm.DisaggregatedParams", "trtllm.ContextPhaseParams", "trtllm.TokenLogprob",
		"trtllm.TopLogprob", "trtllm.AbortResponse",
		"smg.grpc.common.GetTokenizerChunk", "smg.grpc.common.SubscribeKvEventsRequest",
		"smg.grpc.common.KvEventBatch", "smg.grpc.common.KvCacheEvent", "smg.grpc.common.KvBlocksStored",
		"smg.grpc.common.KvBlock", "smg.grpc.common.KvBlocksRemoved",
	} {
		if !inTable[name] {
			t.Errorf("the table lacks %s", name)
		}
	}
}

// trtllmFieldsUsed are the TensorRT-LLM fields the gateway sends (backend/enginerpc/trtllm.go) or reads
// (there and Detect): each must be in the table, so the comparison above pins its number and type.
var trtllmFieldsUsed = map[protoreflect.FullName][]protoreflect.Name{
	"trtllm.GenerateRequest": {"request_id", "tokenized", "sampling_config", "output_config", "max_tokens", "streaming",
		"guided_decoding", "stop", "stop_token_ids", "ignore_eos", "bad", "bad_token_ids", "include_stop_token_in_output"},
	"trtllm.TokenizedInput": {"original_text", "input_token_ids"},
	"trtllm.SamplingConfig": {"beam_width", "num_return_sequences", "top_k", "top_p", "seed", "temperature", "min_tokens",
		"repetition_penalty", "presence_penalty", "frequency_penalty", "min_p"},
	"trtllm.OutputConfig":          {"exclude_input_from_output"},
	"trtllm.GuidedDecodingParams":  {"guide_type", "guide"},
	"trtllm.GenerateResponse":      {"request_id", "chunk", "complete"},
	"trtllm.GenerateStreamChunk":   {"token_ids", "prompt_tokens", "completion_tokens", "cached_tokens"},
	"trtllm.GenerateComplete":      {"output_token_ids", "finish_reason", "matched_stop_str", "matched_token_id", "prompt_tokens", "completion_tokens", "cached_tokens"},
	"trtllm.AbortRequest":          {"request_id"},
	"trtllm.GetModelInfoResponse":  {"model_id", "max_seq_len"},
	"trtllm.DisaggregatedParams":   {"request_type"}, // the simulator refuses all but context-and-generation
	"trtllm.HealthCheckResponse":   {"status"},
	"trtllm.GetServerInfoResponse": {"backend"},
}

// TestTRTLLMFieldsUsedArePinned guards the TensorRT-LLM rows the gateway depends on.
func TestTRTLLMFieldsUsedArePinned(t *testing.T) {
	inTable := map[protoreflect.FullName]bool{}
	for _, f := range upstreamFields {
		inTable[f.msg.Append(f.name)] = true
	}
	for msg, names := range trtllmFieldsUsed {
		for _, n := range names {
			if !inTable[msg.Append(n)] {
				t.Errorf("%s.%s is used but not pinned in the table", msg, n)
			}
		}
	}
}

var upstreamFields = []wireField{
	// common.proto
	{"smg.grpc.common.GetTokenizerChunk", "data", 1, "bytes", ""},
	{"smg.grpc.common.GetTokenizerChunk", "sha256", 2, "string", ""},
	{"smg.grpc.common.SubscribeKvEventsRequest", "start_sequence_number", 1, "uint64", ""},
	{"smg.grpc.common.KvEventBatch", "sequence_number", 1, "uint64", ""},
	{"smg.grpc.common.KvEventBatch", "timestamp", 2, "double", ""},
	{"smg.grpc.common.KvEventBatch", "events", 3, "repeated smg.grpc.common.KvCacheEvent", ""},
	{"smg.grpc.common.KvEventBatch", "dp_rank", 4, "optional int32", ""},
	{"smg.grpc.common.KvCacheEvent", "event_id", 1, "uint64", ""},
	{"smg.grpc.common.KvCacheEvent", "stored", 2, "smg.grpc.common.KvBlocksStored", "data"},
	{"smg.grpc.common.KvCacheEvent", "removed", 3, "smg.grpc.common.KvBlocksRemoved", "data"},
	{"smg.grpc.common.KvCacheEvent", "cleared", 4, "smg.grpc.common.KvCacheCleared", "data"},
	{"smg.grpc.common.KvBlocksStored", "blocks", 1, "repeated smg.grpc.common.KvBlock", ""},
	{"smg.grpc.common.KvBlocksStored", "parent_block_hash", 2, "optional int64", ""},
	{"smg.grpc.common.KvBlock", "block_hash", 1, "int64", ""},
	{"smg.grpc.common.KvBlock", "token_ids", 2, "repeated uint32", ""},
	{"smg.grpc.common.KvBlock", "block_size", 3, "int32", ""},
	{"smg.grpc.common.KvBlock", "lora_id", 4, "optional int64", ""},
	{"smg.grpc.common.KvBlock", "cache_level", 5, "optional int32", ""},
	{"smg.grpc.common.KvBlocksRemoved", "block_hashes", 1, "repeated int64", ""},
	{"smg.grpc.common.KvBlocksRemoved", "cache_level", 2, "optional int32", ""},
	{"smg.grpc.common.FlushCacheRequest", "timeout_s", 1, "float", ""},
	{"smg.grpc.common.FlushCacheResponse", "success", 1, "bool", ""},
	{"smg.grpc.common.FlushCacheResponse", "message", 2, "string", ""},
	{"smg.grpc.common.StartProfileRequest", "output_dir", 1, "optional string", ""},
	{"smg.grpc.common.StartProfileRequest", "start_step", 2, "optional int32", ""},
	{"smg.grpc.common.StartProfileRequest", "num_steps", 3, "optional int32", ""},
	{"smg.grpc.common.StartProfileRequest", "activities", 4, "repeated string", ""},
	{"smg.grpc.common.StartProfileRequest", "with_stack", 5, "optional bool", ""},
	{"smg.grpc.common.StartProfileRequest", "record_shapes", 6, "optional bool", ""},
	{"smg.grpc.common.StartProfileRequest", "profile_by_stage", 7, "bool", ""},
	{"smg.grpc.common.ProfileResponse", "success", 1, "bool", ""},
	{"smg.grpc.common.ProfileResponse", "message", 2, "string", ""},
	{"smg.grpc.common.ShmHandle", "name", 1, "string", ""},
	{"smg.grpc.common.ShmHandle", "offset", 2, "uint64", ""},
	{"smg.grpc.common.ShmHandle", "nbytes", 3, "uint64", ""},
	{"smg.grpc.common.ShmHandle", "owner_id", 4, "string", ""},
	{"smg.grpc.common.RemoteTensorHandle", "transport", 1, "string", ""},
	{"smg.grpc.common.RemoteTensorHandle", "descriptor", 2, "bytes", ""},
	{"smg.grpc.common.RemoteTensorHandle", "nbytes", 3, "uint64", ""},
	// sglang_scheduler.proto
	{"sglang.grpc.scheduler.SamplingParams", "temperature", 1, "float", ""},
	{"sglang.grpc.scheduler.SamplingParams", "top_p", 2, "float", ""},
	{"sglang.grpc.scheduler.SamplingParams", "top_k", 3, "int32", ""},
	{"sglang.grpc.scheduler.SamplingParams", "min_p", 4, "float", ""},
	{"sglang.grpc.scheduler.SamplingParams", "frequency_penalty", 5, "float", ""},
	{"sglang.grpc.scheduler.SamplingParams", "presence_penalty", 6, "float", ""},
	{"sglang.grpc.scheduler.SamplingParams", "repetition_penalty", 7, "float", ""},
	{"sglang.grpc.scheduler.SamplingParams", "max_new_tokens", 8, "optional uint32", ""},
	{"sglang.grpc.scheduler.SamplingParams", "stop", 9, "repeated string", ""},
	{"sglang.grpc.scheduler.SamplingParams", "stop_token_ids", 10, "repeated uint32", ""},
	{"sglang.grpc.scheduler.SamplingParams", "skip_special_tokens", 11, "bool", ""},
	{"sglang.grpc.scheduler.SamplingParams", "spaces_between_special_tokens", 12, "bool", ""},
	{"sglang.grpc.scheduler.SamplingParams", "regex", 13, "string", "constraint"},
	{"sglang.grpc.scheduler.SamplingParams", "json_schema", 14, "string", "constraint"},
	{"sglang.grpc.scheduler.SamplingParams", "ebnf_grammar", 15, "string", "constraint"},
	{"sglang.grpc.scheduler.SamplingParams", "structural_tag", 16, "string", "constraint"},
	{"sglang.grpc.scheduler.SamplingParams", "n", 17, "uint32", ""},
	{"sglang.grpc.scheduler.SamplingParams", "min_new_tokens", 18, "uint32", ""},
	{"sglang.grpc.scheduler.SamplingParams", "ignore_eos", 19, "bool", ""},
	{"sglang.grpc.scheduler.SamplingParams", "no_stop_trim", 20, "bool", ""},
	{"sglang.grpc.scheduler.SamplingParams", "stream_interval", 21, "optional int32", ""},
	{"sglang.grpc.scheduler.SamplingParams", "logit_bias", 22, "map<string,float>", ""},
	{"sglang.grpc.scheduler.SamplingParams", "custom_params", 23, "google.protobuf.Struct", ""},
	{"sglang.grpc.scheduler.DisaggregatedParams", "bootstrap_host", 1, "string", ""},
	{"sglang.grpc.scheduler.DisaggregatedParams", "bootstrap_port", 2, "int32", ""},
	{"sglang.grpc.scheduler.DisaggregatedParams", "bootstrap_room", 3, "int32", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "request_id", 1, "string", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "tokenized", 2, "sglang.grpc.scheduler.TokenizedInput", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "mm_inputs", 3, "sglang.grpc.scheduler.MultimodalInputs", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "sampling_params", 4, "sglang.grpc.scheduler.SamplingParams", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "return_logprob", 5, "bool", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "logprob_start_len", 6, "int32", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "top_logprobs_num", 7, "int32", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "token_ids_logprob", 8, "repeated uint32", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "return_hidden_states", 9, "bool", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "disaggregated_params", 10, "sglang.grpc.scheduler.DisaggregatedParams", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "custom_logit_processor", 11, "string", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "timestamp", 12, "google.protobuf.Timestamp", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "log_metrics", 13, "bool", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "input_embeds", 14, "repeated float", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "lora_id", 15, "string", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "data_parallel_rank", 16, "int32", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "stream", 17, "bool", ""},
	{"sglang.grpc.scheduler.GenerateRequest", "require_reasoning", 18, "bool", ""},
	{"sglang.grpc.scheduler.TokenizedInput", "original_text", 1, "string", ""},
	{"sglang.grpc.scheduler.TokenizedInput", "input_ids", 2, "repeated uint32", ""},
	{"sglang.grpc.scheduler.TensorData", "data", 1, "bytes", ""},
	{"sglang.grpc.scheduler.TensorData", "shape", 2, "repeated uint32", ""},
	{"sglang.grpc.scheduler.TensorData", "dtype", 3, "string", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "image_urls", 1, "repeated string", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "video_urls", 2, "repeated string", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "audio_urls", 3, "repeated string", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "pixel_values", 4, "sglang.grpc.scheduler.TensorData", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "image_data", 5, "repeated bytes", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "video_data", 6, "repeated bytes", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "audio_data", 7, "repeated bytes", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "modalities", 8, "repeated string", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "model_specific_tensors", 9, "map<string,sglang.grpc.scheduler.TensorData>", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "im_token_id", 10, "optional uint32", ""},
	{"sglang.grpc.scheduler.MultimodalInputs", "mm_placeholders", 11, "repeated sglang.grpc.scheduler.PlaceholderRange", ""},
	{"sglang.grpc.scheduler.PlaceholderRange", "offset", 1, "uint32", ""},
	{"sglang.grpc.scheduler.PlaceholderRange", "length", 2, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateResponse", "request_id", 1, "string", ""},
	{"sglang.grpc.scheduler.GenerateResponse", "chunk", 2, "sglang.grpc.scheduler.GenerateStreamChunk", "response"},
	{"sglang.grpc.scheduler.GenerateResponse", "complete", 3, "sglang.grpc.scheduler.GenerateComplete", "response"},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "token_ids", 1, "repeated uint32", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "prompt_tokens", 2, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "completion_tokens", 3, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "cached_tokens", 4, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "reasoning_tokens", 9, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "output_logprobs", 5, "sglang.grpc.scheduler.OutputLogProbs", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "hidden_states", 6, "repeated float", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "input_logprobs", 7, "sglang.grpc.scheduler.InputLogProbs", ""},
	{"sglang.grpc.scheduler.GenerateStreamChunk", "index", 8, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "output_ids", 1, "repeated uint32", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "finish_reason", 2, "string", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "prompt_tokens", 3, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "completion_tokens", 4, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "cached_tokens", 5, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "reasoning_tokens", 12, "uint32", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "output_logprobs", 6, "sglang.grpc.scheduler.OutputLogProbs", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "all_hidden_states", 7, "repeated sglang.grpc.scheduler.HiddenStates", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "matched_token_id", 8, "uint32", "matched_stop"},
	{"sglang.grpc.scheduler.GenerateComplete", "matched_stop_str", 9, "string", "matched_stop"},
	{"sglang.grpc.scheduler.GenerateComplete", "input_logprobs", 10, "sglang.grpc.scheduler.InputLogProbs", ""},
	{"sglang.grpc.scheduler.GenerateComplete", "index", 11, "uint32", ""},
	{"sglang.grpc.scheduler.OutputLogProbs", "token_logprobs", 1, "repeated float", ""},
	{"sglang.grpc.scheduler.OutputLogProbs", "token_ids", 2, "repeated uint32", ""},
	{"sglang.grpc.scheduler.OutputLogProbs", "top_logprobs", 3, "repeated sglang.grpc.scheduler.TopLogProbs", ""},
	{"sglang.grpc.scheduler.InputLogProbs", "token_logprobs", 1, "repeated sglang.grpc.scheduler.InputTokenLogProb", ""},
	{"sglang.grpc.scheduler.InputLogProbs", "token_ids", 2, "repeated uint32", ""},
	{"sglang.grpc.scheduler.InputLogProbs", "top_logprobs", 3, "repeated sglang.grpc.scheduler.TopLogProbs", ""},
	{"sglang.grpc.scheduler.InputTokenLogProb", "value", 1, "optional float", ""},
	{"sglang.grpc.scheduler.TopLogProbs", "values", 1, "repeated float", ""},
	{"sglang.grpc.scheduler.TopLogProbs", "token_ids", 2, "repeated uint32", ""},
	{"sglang.grpc.scheduler.HiddenStates", "values", 1, "repeated float", ""},
	{"sglang.grpc.scheduler.HiddenStates", "layer", 2, "int32", ""},
	{"sglang.grpc.scheduler.HiddenStates", "position", 3, "int32", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "request_id", 1, "string", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "tokenized", 2, "sglang.grpc.scheduler.TokenizedInput", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "mm_inputs", 4, "sglang.grpc.scheduler.MultimodalInputs", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "sampling_params", 5, "sglang.grpc.scheduler.SamplingParams", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "token_type_ids", 7, "repeated int32", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "data_parallel_rank", 8, "int32", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "is_cross_encoder", 9, "bool", ""},
	{"sglang.grpc.scheduler.EmbedRequest", "texts", 10, "repeated string", ""},
	{"sglang.grpc.scheduler.EmbedResponse", "embedding_dim", 4, "uint32", ""},
	{"sglang.grpc.scheduler.EmbedResponse", "embedding", 5, "repeated float", ""},
	{"sglang.grpc.scheduler.EmbedResponse", "prompt_tokens", 6, "uint32", ""},
	{"sglang.grpc.scheduler.HealthCheckResponse", "healthy", 1, "bool", ""},
	{"sglang.grpc.scheduler.HealthCheckResponse", "message", 2, "string", ""},
	{"sglang.grpc.scheduler.AbortRequest", "request_id", 1, "string", ""},
	{"sglang.grpc.scheduler.AbortRequest", "reason", 2, "string", ""},
	{"sglang.grpc.scheduler.AbortResponse", "success", 1, "bool", ""},
	{"sglang.grpc.scheduler.AbortResponse", "message", 2, "string", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterRequest", "lora_name", 1, "string", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterRequest", "lora_path", 2, "string", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterRequest", "pinned", 3, "bool", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterRequest", "lora_id", 4, "string", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterResponse", "success", 1, "bool", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterResponse", "message", 2, "string", ""},
	{"sglang.grpc.scheduler.LoadLoRAAdapterResponse", "loaded_lora_ids", 3, "repeated string", ""},
	{"sglang.grpc.scheduler.UnloadLoRAAdapterRequest", "lora_name", 1, "string", ""},
	{"sglang.grpc.scheduler.UnloadLoRAAdapterRequest", "lora_id", 2, "string", ""},
	{"sglang.grpc.scheduler.UnloadLoRAAdapterResponse", "success", 1, "bool", ""},
	{"sglang.grpc.scheduler.UnloadLoRAAdapterResponse", "message", 2, "string", ""},
	{"sglang.grpc.scheduler.UnloadLoRAAdapterResponse", "loaded_lora_ids", 3, "repeated string", ""},
	{"sglang.grpc.scheduler.LoadedLoRAAdapter", "lora_id", 1, "string", ""},
	{"sglang.grpc.scheduler.LoadedLoRAAdapter", "lora_name", 2, "string", ""},
	{"sglang.grpc.scheduler.LoadedLoRAAdapter", "lora_path", 3, "string", ""},
	{"sglang.grpc.scheduler.LoadedLoRAAdapter", "pinned", 4, "bool", ""},
	{"sglang.grpc.scheduler.ListLoadedLoRAAdaptersResponse", "loaded_adapters", 1, "repeated sglang.grpc.scheduler.LoadedLoRAAdapter", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "model_path", 1, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "tokenizer_path", 2, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "is_generation", 3, "bool", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "preferred_sampling_params", 4, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "weight_version", 5, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "served_model_name", 6, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "max_context_length", 7, "int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "vocab_size", 8, "int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "supports_vision", 9, "bool", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "model_type", 10, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "eos_token_ids", 11, "repeated int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "pad_token_id", 12, "int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "bos_token_id", 13, "int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "max_req_input_len", 14, "int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "architectures", 15, "repeated string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "id2label_json", 16, "string", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "num_labels", 17, "int32", ""},
	{"sglang.grpc.scheduler.GetModelInfoResponse", "default_sampling_params_json", 20, "string", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "server_args", 1, "google.protobuf.Struct", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "scheduler_info", 2, "google.protobuf.Struct", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "active_requests", 3, "int32", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "is_paused", 4, "bool", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "last_receive_timestamp", 5, "double", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "uptime_seconds", 6, "double", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "sglang_version", 7, "string", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "server_type", 8, "string", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "start_time", 9, "google.protobuf.Timestamp", ""},
	{"sglang.grpc.scheduler.GetServerInfoResponse", "max_total_num_tokens", 10, "int32", ""},
	{"sglang.grpc.scheduler.GetLoadsRequest", "dp_rank", 1, "optional int32", ""},
	{"sglang.grpc.scheduler.GetLoadsRequest", "include", 2, "repeated string", ""},
	{"sglang.grpc.scheduler.GetLoadsResponse", "timestamp", 1, "string", ""},
	{"sglang.grpc.scheduler.GetLoadsResponse", "version", 2, "string", ""},
	{"sglang.grpc.scheduler.GetLoadsResponse", "dp_rank_count", 3, "int32", ""},
	{"sglang.grpc.scheduler.GetLoadsResponse", "loads", 4, "repeated sglang.grpc.scheduler.SchedulerLoad", ""},
	{"sglang.grpc.scheduler.GetLoadsResponse", "aggregate", 5, "sglang.grpc.scheduler.AggregateMetrics", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "dp_rank", 1, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "num_running_reqs", 2, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "num_waiting_reqs", 3, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "num_total_reqs", 4, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "num_used_tokens", 5, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "max_total_num_tokens", 6, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "token_usage", 7, "double", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "gen_throughput", 8, "double", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "cache_hit_rate", 9, "double", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "utilization", 10, "double", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "max_running_requests", 11, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "num_waiting_uncached_tokens", 17, "int32", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "memory", 12, "optional sglang.grpc.scheduler.MemoryMetrics", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "speculative", 13, "optional sglang.grpc.scheduler.SpeculativeMetrics", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "lora", 14, "optional sglang.grpc.scheduler.LoRAMetrics", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "disaggregation", 15, "optional sglang.grpc.scheduler.DisaggregationMetrics", ""},
	{"sglang.grpc.scheduler.SchedulerLoad", "queues", 16, "optional sglang.grpc.scheduler.QueueMetrics", ""},
	{"sglang.grpc.scheduler.MemoryMetrics", "weight_gb", 1, "double", ""},
	{"sglang.grpc.scheduler.MemoryMetrics", "kv_cache_gb", 2, "double", ""},
	{"sglang.grpc.scheduler.MemoryMetrics", "graph_gb", 3, "double", ""},
	{"sglang.grpc.scheduler.MemoryMetrics", "token_capacity", 4, "int32", ""},
	{"sglang.grpc.scheduler.SpeculativeMetrics", "accept_length", 1, "double", ""},
	{"sglang.grpc.scheduler.SpeculativeMetrics", "accept_rate", 2, "double", ""},
	{"sglang.grpc.scheduler.LoRAMetrics", "slots_used", 1, "int32", ""},
	{"sglang.grpc.scheduler.LoRAMetrics", "slots_total", 2, "int32", ""},
	{"sglang.grpc.scheduler.LoRAMetrics", "utilization", 3, "double", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "mode", 1, "string", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "prefill_prealloc_queue_reqs", 2, "int32", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "prefill_inflight_queue_reqs", 3, "int32", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "decode_prealloc_queue_reqs", 4, "int32", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "decode_transfer_queue_reqs", 5, "int32", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "decode_retracted_queue_reqs", 6, "int32", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "kv_transfer_speed_gb_s", 7, "double", ""},
	{"sglang.grpc.scheduler.DisaggregationMetrics", "kv_transfer_latency_ms", 8, "double", ""},
	{"sglang.grpc.scheduler.QueueMetrics", "waiting", 1, "int32", ""},
	{"sglang.grpc.scheduler.QueueMetrics", "grammar", 2, "int32", ""},
	{"sglang.grpc.scheduler.QueueMetrics", "paused", 3, "int32", ""},
	{"sglang.grpc.scheduler.QueueMetrics", "retracted", 4, "int32", ""},
	{"sglang.grpc.scheduler.AggregateMetrics", "total_running_reqs", 1, "int32", ""},
	{"sglang.grpc.scheduler.AggregateMetrics", "total_waiting_reqs", 2, "int32", ""},
	{"sglang.grpc.scheduler.AggregateMetrics", "total_reqs", 3, "int32", ""},
	{"sglang.grpc.scheduler.AggregateMetrics", "avg_token_usage", 4, "double", ""},
	{"sglang.grpc.scheduler.AggregateMetrics", "avg_throughput", 5, "double", ""},
	{"sglang.grpc.scheduler.AggregateMetrics", "avg_utilization", 6, "double", ""},
	// vllm_engine.proto
	{"vllm.grpc.engine.SamplingParams", "temperature", 1, "optional float", ""},
	{"vllm.grpc.engine.SamplingParams", "top_p", 2, "float", ""},
	{"vllm.grpc.engine.SamplingParams", "top_k", 3, "uint32", ""},
	{"vllm.grpc.engine.SamplingParams", "min_p", 4, "float", ""},
	{"vllm.grpc.engine.SamplingParams", "frequency_penalty", 5, "float", ""},
	{"vllm.grpc.engine.SamplingParams", "presence_penalty", 6, "float", ""},
	{"vllm.grpc.engine.SamplingParams", "repetition_penalty", 7, "float", ""},
	{"vllm.grpc.engine.SamplingParams", "max_tokens", 8, "optional uint32", ""},
	{"vllm.grpc.engine.SamplingParams", "min_tokens", 9, "uint32", ""},
	{"vllm.grpc.engine.SamplingParams", "stop", 10, "repeated string", ""},
	{"vllm.grpc.engine.SamplingParams", "stop_token_ids", 11, "repeated uint32", ""},
	{"vllm.grpc.engine.SamplingParams", "skip_special_tokens", 12, "bool", ""},
	{"vllm.grpc.engine.SamplingParams", "spaces_between_special_tokens", 13, "bool", ""},
	{"vllm.grpc.engine.SamplingParams", "ignore_eos", 14, "bool", ""},
	{"vllm.grpc.engine.SamplingParams", "n", 15, "uint32", ""},
	{"vllm.grpc.engine.SamplingParams", "logprobs", 22, "optional int32", ""},
	{"vllm.grpc.engine.SamplingParams", "prompt_logprobs", 23, "optional int32", ""},
	{"vllm.grpc.engine.SamplingParams", "seed", 24, "optional int32", ""},
	{"vllm.grpc.engine.SamplingParams", "include_stop_str_in_output", 25, "bool", ""},
	{"vllm.grpc.engine.SamplingParams", "logit_bias", 26, "map<int32,float>", ""},
	{"vllm.grpc.engine.SamplingParams", "truncate_prompt_tokens", 27, "optional int32", ""},
	{"vllm.grpc.engine.SamplingParams", "json_schema", 16, "string", "constraint"},
	{"vllm.grpc.engine.SamplingParams", "regex", 17, "string", "constraint"},
	{"vllm.grpc.engine.SamplingParams", "grammar", 18, "string", "constraint"},
	{"vllm.grpc.engine.SamplingParams", "structural_tag", 19, "string", "constraint"},
	{"vllm.grpc.engine.SamplingParams", "json_object", 20, "bool", "constraint"},
	{"vllm.grpc.engine.SamplingParams", "choice", 21, "vllm.grpc.engine.ChoiceConstraint", "constraint"},
	{"vllm.grpc.engine.ChoiceConstraint", "choices", 1, "repeated string", ""},
	{"vllm.grpc.engine.TokenizedInput", "original_text", 1, "string", ""},
	{"vllm.grpc.engine.TokenizedInput", "input_ids", 2, "repeated uint32", ""},
	{"vllm.grpc.engine.TensorData", "shape", 2, "repeated uint32", ""},
	{"vllm.grpc.engine.TensorData", "dtype", 3, "string", ""},
	{"vllm.grpc.engine.TensorData", "inline", 1, "bytes", "payload"},
	{"vllm.grpc.engine.TensorData", "shm", 4, "smg.grpc.common.ShmHandle", "payload"},
	{"vllm.grpc.engine.TensorData", "remote", 5, "smg.grpc.common.RemoteTensorHandle", "payload"},
	{"vllm.grpc.engine.PlaceholderRange", "offset", 1, "uint32", ""},
	{"vllm.grpc.engine.PlaceholderRange", "length", 2, "uint32", ""},
	{"vllm.grpc.engine.MultimodalInputs", "pixel_values", 2, "vllm.grpc.engine.TensorData", ""},
	{"vllm.grpc.engine.MultimodalInputs", "model_specific_tensors", 3, "map<string,vllm.grpc.engine.TensorData>", ""},
	{"vllm.grpc.engine.MultimodalInputs", "im_token_id", 4, "optional uint32", ""},
	{"vllm.grpc.engine.MultimodalInputs", "mm_placeholders", 5, "repeated vllm.grpc.engine.PlaceholderRange", ""},
	{"vllm.grpc.engine.MultimodalInputs", "mm_hashes", 6, "repeated string", ""},
	{"vllm.grpc.engine.MultimodalInputs", "batched_keys", 7, "repeated string", ""},
	{"vllm.grpc.engine.MultimodalInputs", "flat_keys", 8, "map<string,string>", ""},
	{"vllm.grpc.engine.MultimodalInputs", "keep_on_cpu_keys", 9, "repeated string", ""},
	{"vllm.grpc.engine.MultimodalInputs", "modality", 10, "smg.grpc.common.Modality", ""},
	{"vllm.grpc.engine.GenerateRequest", "request_id", 1, "string", ""},
	{"vllm.grpc.engine.GenerateRequest", "tokenized", 2, "vllm.grpc.engine.TokenizedInput", "input"},
	{"vllm.grpc.engine.GenerateRequest", "text", 3, "string", "input"},
	{"vllm.grpc.engine.GenerateRequest", "sampling_params", 4, "vllm.grpc.engine.SamplingParams", ""},
	{"vllm.grpc.engine.GenerateRequest", "stream", 5, "bool", ""},
	{"vllm.grpc.engine.GenerateRequest", "kv_transfer_params", 6, "vllm.grpc.engine.KvTransferParams", ""},
	{"vllm.grpc.engine.GenerateRequest", "mm_inputs", 7, "vllm.grpc.engine.MultimodalInputs", ""},
	{"vllm.grpc.engine.GenerateRequest", "kv_transfer_params_json", 8, "optional string", ""},
	{"vllm.grpc.engine.GenerateRequest", "data_parallel_rank", 9, "optional int32", ""},
	{"vllm.grpc.engine.KvTransferParams", "remote_host", 1, "string", ""},
	{"vllm.grpc.engine.KvTransferParams", "remote_port", 2, "uint32", ""},
	{"vllm.grpc.engine.OutputLogProbs", "token_logprobs", 1, "repeated float", ""},
	{"vllm.grpc.engine.OutputLogProbs", "token_ids", 2, "repeated uint32", ""},
	{"vllm.grpc.engine.OutputLogProbs", "top_logprobs", 3, "repeated vllm.grpc.engine.TopLogProbs", ""},
	{"vllm.grpc.engine.InputLogProbs", "token_logprobs", 1, "repeated vllm.grpc.engine.InputTokenLogProb", ""},
	{"vllm.grpc.engine.InputLogProbs", "token_ids", 2, "repeated uint32", ""},
	{"vllm.grpc.engine.InputLogProbs", "top_logprobs", 3, "repeated vllm.grpc.engine.TopLogProbs", ""},
	{"vllm.grpc.engine.InputTokenLogProb", "value", 1, "optional float", ""},
	{"vllm.grpc.engine.TopLogProbs", "values", 1, "repeated float", ""},
	{"vllm.grpc.engine.TopLogProbs", "token_ids", 2, "repeated uint32", ""},
	{"vllm.grpc.engine.GenerateResponse", "chunk", 1, "vllm.grpc.engine.GenerateStreamChunk", "response"},
	{"vllm.grpc.engine.GenerateResponse", "complete", 2, "vllm.grpc.engine.GenerateComplete", "response"},
	{"vllm.grpc.engine.GenerateStreamChunk", "token_ids", 1, "repeated uint32", ""},
	{"vllm.grpc.engine.GenerateStreamChunk", "prompt_tokens", 2, "uint32", ""},
	{"vllm.grpc.engine.GenerateStreamChunk", "completion_tokens", 3, "uint32", ""},
	{"vllm.grpc.engine.GenerateStreamChunk", "cached_tokens", 4, "uint32", ""},
	{"vllm.grpc.engine.GenerateStreamChunk", "output_logprobs", 5, "vllm.grpc.engine.OutputLogProbs", ""},
	{"vllm.grpc.engine.GenerateStreamChunk", "input_logprobs", 6, "vllm.grpc.engine.InputLogProbs", ""},
	{"vllm.grpc.engine.GenerateStreamChunk", "index", 7, "uint32", ""},
	{"vllm.grpc.engine.GenerateComplete", "output_ids", 1, "repeated uint32", ""},
	{"vllm.grpc.engine.GenerateComplete", "finish_reason", 2, "string", ""},
	{"vllm.grpc.engine.GenerateComplete", "prompt_tokens", 3, "uint32", ""},
	{"vllm.grpc.engine.GenerateComplete", "completion_tokens", 4, "uint32", ""},
	{"vllm.grpc.engine.GenerateComplete", "cached_tokens", 5, "uint32", ""},
	{"vllm.grpc.engine.GenerateComplete", "output_logprobs", 6, "vllm.grpc.engine.OutputLogProbs", ""},
	{"vllm.grpc.engine.GenerateComplete", "input_logprobs", 7, "vllm.grpc.engine.InputLogProbs", ""},
	{"vllm.grpc.engine.GenerateComplete", "index", 8, "uint32", ""},
	{"vllm.grpc.engine.GenerateComplete", "kv_transfer_params", 9, "vllm.grpc.engine.KvTransferParams", ""},
	{"vllm.grpc.engine.GenerateComplete", "matched_token_id", 10, "uint32", "matched_stop"},
	{"vllm.grpc.engine.GenerateComplete", "matched_stop_str", 11, "string", "matched_stop"},
	{"vllm.grpc.engine.GenerateComplete", "kv_transfer_params_json", 12, "optional string", ""},
	{"vllm.grpc.engine.EmbedRequest", "request_id", 1, "string", ""},
	{"vllm.grpc.engine.EmbedRequest", "tokenized", 2, "vllm.grpc.engine.TokenizedInput", ""},
	{"vllm.grpc.engine.EmbedResponse", "embedding", 1, "repeated float", ""},
	{"vllm.grpc.engine.EmbedResponse", "prompt_tokens", 2, "uint32", ""},
	{"vllm.grpc.engine.EmbedResponse", "embedding_dim", 3, "uint32", ""},
	{"vllm.grpc.engine.HealthCheckResponse", "healthy", 1, "bool", ""},
	{"vllm.grpc.engine.HealthCheckResponse", "message", 2, "string", ""},
	{"vllm.grpc.engine.AbortRequest", "request_ids", 1, "repeated string", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "model_path", 1, "string", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "is_generation", 2, "bool", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "max_context_length", 3, "uint32", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "vocab_size", 4, "uint32", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "supports_vision", 5, "bool", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "served_model_name", 6, "string", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "tokenizer_path", 7, "string", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "model_type", 8, "string", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "architectures", 9, "repeated string", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "eos_token_ids", 10, "repeated int32", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "pad_token_id", 11, "int32", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "bos_token_id", 12, "int32", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "max_req_input_len", 13, "int32", ""},
	{"vllm.grpc.engine.GetModelInfoResponse", "default_sampling_params_json", 14, "string", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "active_requests", 1, "uint32", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "is_paused", 2, "bool", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "last_receive_timestamp", 3, "double", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "uptime_seconds", 4, "double", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "server_type", 5, "string", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "kv_connector", 6, "string", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "kv_role", 7, "string", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "kv_engine_id", 8, "string", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "data_parallel_size", 9, "int32", ""},
	{"vllm.grpc.engine.GetServerInfoResponse", "shm_namespace_id", 10, "string", ""},
	{"vllm.grpc.engine.GetLoadsRequest", "dp_rank", 1, "optional int32", ""},
	{"vllm.grpc.engine.GetLoadsRequest", "include", 2, "repeated string", ""},
	{"vllm.grpc.engine.GetLoadsResponse", "timestamp", 1, "string", ""},
	{"vllm.grpc.engine.GetLoadsResponse", "version", 2, "string", ""},
	{"vllm.grpc.engine.GetLoadsResponse", "dp_rank_count", 3, "int32", ""},
	{"vllm.grpc.engine.GetLoadsResponse", "loads", 4, "repeated vllm.grpc.engine.SchedulerLoad", ""},
	{"vllm.grpc.engine.SchedulerLoad", "dp_rank", 1, "int32", ""},
	{"vllm.grpc.engine.SchedulerLoad", "num_running_reqs", 2, "int32", ""},
	{"vllm.grpc.engine.SchedulerLoad", "num_waiting_reqs", 3, "int32", ""},
	{"vllm.grpc.engine.SchedulerLoad", "num_total_reqs", 4, "int32", ""},
	{"vllm.grpc.engine.SchedulerLoad", "num_used_tokens", 5, "int32", ""},
	{"vllm.grpc.engine.SchedulerLoad", "max_total_num_tokens", 6, "int32", ""},
	{"vllm.grpc.engine.SchedulerLoad", "token_usage", 7, "double", ""},
	{"vllm.grpc.engine.SchedulerLoad", "gen_throughput", 8, "double", ""},
	{"vllm.grpc.engine.SchedulerLoad", "cache_hit_rate", 9, "double", ""},
	{"vllm.grpc.engine.SchedulerLoad", "utilization", 10, "double", ""},
	{"vllm.grpc.engine.SchedulerLoad", "max_running_requests", 11, "int32", ""},
	// trtllm_service.proto
	{"trtllm.GenerateRequest", "request_id", 1, "string", ""},
	{"trtllm.GenerateRequest", "tokenized", 2, "trtllm.TokenizedInput", ""},
	{"trtllm.GenerateRequest", "sampling_config", 3, "trtllm.SamplingConfig", ""},
	{"trtllm.GenerateRequest", "output_config", 4, "trtllm.OutputConfig", ""},
	{"trtllm.GenerateRequest", "max_tokens", 5, "uint32", ""},
	{"trtllm.GenerateRequest", "streaming", 6, "bool", ""},
	{"trtllm.GenerateRequest", "guided_decoding", 11, "optional trtllm.GuidedDecodingParams", ""},
	{"trtllm.GenerateRequest", "embedding_bias", 12, "repeated float", ""},
	{"trtllm.GenerateRequest", "lora_config", 13, "optional trtllm.LoraConfig", ""},
	{"trtllm.GenerateRequest", "prompt_tuning_config", 14, "optional trtllm.PromptTuningConfig", ""},
	{"trtllm.GenerateRequest", "multimodal_input", 15, "optional trtllm.MultimodalInput", ""},
	{"trtllm.GenerateRequest", "kv_cache_retention", 16, "optional trtllm.KvCacheRetentionConfig", ""},
	{"trtllm.GenerateRequest", "disaggregated_params", 17, "optional trtllm.DisaggregatedParams", ""},
	{"trtllm.GenerateRequest", "lookahead_config", 18, "optional trtllm.LookaheadConfig", ""},
	{"trtllm.GenerateRequest", "cache_salt_id", 19, "optional int64", ""},
	{"trtllm.GenerateRequest", "arrival_time", 20, "optional double", ""},
	{"trtllm.GenerateRequest", "stop", 21, "repeated string", ""},
	{"trtllm.GenerateRequest", "stop_token_ids", 22, "repeated uint32", ""},
	{"trtllm.GenerateRequest", "ignore_eos", 23, "bool", ""},
	{"trtllm.GenerateRequest", "bad", 24, "repeated string", ""},
	{"trtllm.GenerateRequest", "bad_token_ids", 25, "repeated uint32", ""},
	{"trtllm.GenerateRequest", "include_stop_token_in_output", 26, "bool", ""},
	{"trtllm.TokenizedInput", "original_text", 1, "string", ""},
	{"trtllm.TokenizedInput", "input_token_ids", 2, "repeated uint32", ""},
	{"trtllm.TokenizedInput", "query_token_ids", 3, "repeated uint32", ""},
	{"trtllm.SamplingConfig", "beam_width", 1, "int32", ""},
	{"trtllm.SamplingConfig", "num_return_sequences", 2, "uint32", ""},
	{"trtllm.SamplingConfig", "top_k", 3, "optional int32", ""},
	{"trtllm.SamplingConfig", "top_p", 4, "optional float", ""},
	{"trtllm.SamplingConfig", "top_p_min", 5, "optional float", ""},
	{"trtllm.SamplingConfig", "top_p_reset_ids", 6, "optional int32", ""},
	{"trtllm.SamplingConfig", "top_p_decay", 7, "optional float", ""},
	{"trtllm.SamplingConfig", "seed", 8, "optional uint64", ""},
	{"trtllm.SamplingConfig", "temperature", 9, "optional float", ""},
	{"trtllm.SamplingConfig", "min_tokens", 10, "optional uint32", ""},
	{"trtllm.SamplingConfig", "beam_search_diversity_rate", 11, "optional float", ""},
	{"trtllm.SamplingConfig", "repetition_penalty", 12, "optional float", ""},
	{"trtllm.SamplingConfig", "presence_penalty", 13, "optional float", ""},
	{"trtllm.SamplingConfig", "frequency_penalty", 14, "optional float", ""},
	{"trtllm.SamplingConfig", "prompt_ignore_length", 15, "optional int32", ""},
	{"trtllm.SamplingConfig", "length_penalty", 16, "optional float", ""},
	{"trtllm.SamplingConfig", "early_stopping", 17, "optional int32", ""},
	{"trtllm.SamplingConfig", "no_repeat_ngram_size", 18, "optional int32", ""},
	{"trtllm.SamplingConfig", "min_p", 19, "optional float", ""},
	{"trtllm.SamplingConfig", "beam_width_array", 20, "repeated int32", ""},
	{"trtllm.OutputConfig", "logprobs", 1, "optional int32", ""},
	{"trtllm.OutputConfig", "prompt_logprobs", 2, "optional int32", ""},
	{"trtllm.OutputConfig", "return_context_logits", 3, "bool", ""},
	{"trtllm.OutputConfig", "return_generation_logits", 4, "bool", ""},
	{"trtllm.OutputConfig", "exclude_input_from_output", 5, "bool", ""},
	{"trtllm.OutputConfig", "return_encoder_output", 6, "bool", ""},
	{"trtllm.OutputConfig", "return_perf_metrics", 7, "bool", ""},
	{"trtllm.GuidedDecodingParams", "guide_type", 1, "trtllm.GuidedDecodingParams.GuideType", ""},
	{"trtllm.GuidedDecodingParams", "guide", 2, "string", ""},
	{"trtllm.LoraConfig", "task_id", 1, "int64", ""},
	{"trtllm.LoraConfig", "weights", 2, "optional bytes", ""},
	{"trtllm.LoraConfig", "config_json", 3, "optional string", ""},
	{"trtllm.PromptTuningConfig", "embedding_table", 1, "bytes", ""},
	{"trtllm.MultimodalInput", "image_data", 1, "repeated bytes", ""},
	{"trtllm.KvCacheRetentionConfig", "policy", 1, "string", ""},
	{"trtllm.KvCacheRetentionConfig", "config_json", 2, "string", ""},
	{"trtllm.DisaggregatedParams", "request_type", 1, "trtllm.DisaggregatedParams.RequestType", ""},
	{"trtllm.DisaggregatedParams", "ctx_request_id", 2, "string", ""},
	{"trtllm.DisaggregatedParams", "context_phase_params", 3, "optional trtllm.ContextPhaseParams", ""},
	{"trtllm.ContextPhaseParams", "first_gen_token_id", 1, "uint32", ""},
	{"trtllm.ContextPhaseParams", "kv_cache_blocks", 2, "bytes", ""},
	{"trtllm.LookaheadConfig", "max_window_size", 1, "int32", ""},
	{"trtllm.LookaheadConfig", "max_ngram_size", 2, "int32", ""},
	{"trtllm.LookaheadConfig", "max_verification_set_size", 3, "int32", ""},
	{"trtllm.GenerateResponse", "request_id", 1, "string", ""},
	{"trtllm.GenerateResponse", "chunk", 2, "trtllm.GenerateStreamChunk", "response"},
	{"trtllm.GenerateResponse", "complete", 3, "trtllm.GenerateComplete", "response"},
	{"trtllm.GenerateStreamChunk", "token_ids", 1, "repeated uint32", ""},
	{"trtllm.GenerateStreamChunk", "sequence_index", 2, "uint32", ""},
	{"trtllm.GenerateStreamChunk", "prompt_tokens", 3, "uint32", ""},
	{"trtllm.GenerateStreamChunk", "completion_tokens", 4, "uint32", ""},
	{"trtllm.GenerateStreamChunk", "cached_tokens", 5, "uint32", ""},
	{"trtllm.GenerateStreamChunk", "logprobs", 6, "repeated trtllm.TokenLogprob", ""},
	{"trtllm.GenerateComplete", "output_token_ids", 1, "repeated uint32", ""},
	{"trtllm.GenerateComplete", "sequence_index", 2, "uint32", ""},
	{"trtllm.GenerateComplete", "finish_reason", 3, "string", ""},
	{"trtllm.GenerateComplete", "matched_stop_str", 4, "string", "matched_stop"},
	{"trtllm.GenerateComplete", "matched_token_id", 13, "uint32", "matched_stop"},
	{"trtllm.GenerateComplete", "prompt_tokens", 5, "uint32", ""},
	{"trtllm.GenerateComplete", "completion_tokens", 6, "uint32", ""},
	{"trtllm.GenerateComplete", "cached_tokens", 7, "uint32", ""},
	{"trtllm.GenerateComplete", "logprobs", 8, "repeated trtllm.TokenLogprob", ""},
	{"trtllm.GenerateComplete", "prompt_logprobs", 9, "repeated trtllm.TokenLogprob", ""},
	{"trtllm.GenerateComplete", "perf_metrics", 10, "optional trtllm.PerfMetrics", ""},
	{"trtllm.GenerateComplete", "context_logits", 11, "optional bytes", ""},
	{"trtllm.GenerateComplete", "generation_logits", 12, "optional bytes", ""},
	{"trtllm.TokenLogprob", "token_id", 1, "uint32", ""},
	{"trtllm.TokenLogprob", "logprob", 2, "float", ""},
	{"trtllm.TokenLogprob", "top_logprobs", 3, "repeated trtllm.TopLogprob", ""},
	{"trtllm.TopLogprob", "token_id", 1, "uint32", ""},
	{"trtllm.TopLogprob", "logprob", 2, "float", ""},
	{"trtllm.PerfMetrics", "arrival_time", 1, "double", ""},
	{"trtllm.PerfMetrics", "first_scheduled_time", 2, "double", ""},
	{"trtllm.PerfMetrics", "first_token_time", 3, "double", ""},
	{"trtllm.PerfMetrics", "last_token_time", 4, "double", ""},
	{"trtllm.PerfMetrics", "kv_cache_transfer_start", 5, "double", ""},
	{"trtllm.PerfMetrics", "kv_cache_transfer_end", 6, "double", ""},
	{"trtllm.PerfMetrics", "kv_cache_size", 7, "int64", ""},
	{"trtllm.EmbedRequest", "request_id", 1, "string", ""},
	{"trtllm.EmbedRequest", "tokenized", 2, "trtllm.TokenizedInput", ""},
	{"trtllm.EmbedResponse", "request_id", 1, "string", ""},
	{"trtllm.EmbedResponse", "embedding", 2, "repeated float", ""},
	{"trtllm.EmbedResponse", "prompt_tokens", 3, "uint32", ""},
	{"trtllm.HealthCheckResponse", "status", 1, "string", ""},
	{"trtllm.AbortRequest", "request_id", 1, "string", ""},
	{"trtllm.AbortResponse", "success", 1, "bool", ""},
	{"trtllm.AbortResponse", "message", 2, "string", ""},
	{"trtllm.GetModelInfoResponse", "model_id", 1, "string", ""},
	{"trtllm.GetModelInfoResponse", "max_input_len", 2, "int32", ""},
	{"trtllm.GetModelInfoResponse", "max_seq_len", 3, "int32", ""},
	{"trtllm.GetModelInfoResponse", "max_batch_size", 4, "int32", ""},
	{"trtllm.GetModelInfoResponse", "vocab_size", 5, "int32", ""},
	{"trtllm.GetModelInfoResponse", "hidden_size", 6, "int32", ""},
	{"trtllm.GetModelInfoResponse", "num_layers", 7, "int32", ""},
	{"trtllm.GetModelInfoResponse", "num_heads", 8, "int32", ""},
	{"trtllm.GetModelInfoResponse", "supported_features", 9, "repeated string", ""},
	{"trtllm.GetServerInfoResponse", "version", 1, "string", ""},
	{"trtllm.GetServerInfoResponse", "backend", 2, "string", ""},
	{"trtllm.GetServerInfoResponse", "tensor_parallel_size", 3, "int32", ""},
	{"trtllm.GetServerInfoResponse", "pipeline_parallel_size", 4, "int32", ""},
	{"trtllm.GetServerInfoResponse", "context_parallel_size", 5, "int32", ""},
	{"trtllm.GetServerInfoResponse", "world_size", 6, "int32", ""},
}

var upstreamEnumValues = []wireEnumValue{
	{"smg.grpc.common.Modality", "MODALITY_UNSPECIFIED", 0},
	{"smg.grpc.common.Modality", "IMAGE", 1},
	{"smg.grpc.common.Modality", "AUDIO", 2},
	{"smg.grpc.common.Modality", "VIDEO", 3},
	{"trtllm.GuidedDecodingParams.GuideType", "GUIDE_TYPE_UNSPECIFIED", 0},
	{"trtllm.GuidedDecodingParams.GuideType", "GUIDE_TYPE_JSON", 1},
	{"trtllm.GuidedDecodingParams.GuideType", "GUIDE_TYPE_JSON_SCHEMA", 2},
	{"trtllm.GuidedDecodingParams.GuideType", "GUIDE_TYPE_REGEX", 3},
	{"trtllm.GuidedDecodingParams.GuideType", "GUIDE_TYPE_EBNF_GRAMMAR", 4},
	{"trtllm.GuidedDecodingParams.GuideType", "GUIDE_TYPE_STRUCTURAL_TAG", 5},
	{"trtllm.DisaggregatedParams.RequestType", "REQUEST_TYPE_CONTEXT_AND_GENERATION", 0},
	{"trtllm.DisaggregatedParams.RequestType", "REQUEST_TYPE_CONTEXT_ONLY", 1},
	{"trtllm.DisaggregatedParams.RequestType", "REQUEST_TYPE_GENERATION_ONLY", 2},
}

var upstreamRPCs = []wireRPC{
	{"sglang.grpc.scheduler.SglangScheduler", "Generate", "sglang.grpc.scheduler.GenerateRequest", "sglang.grpc.scheduler.GenerateResponse", true},
	{"sglang.grpc.scheduler.SglangScheduler", "Embed", "sglang.grpc.scheduler.EmbedRequest", "sglang.grpc.scheduler.EmbedResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "HealthCheck", "sglang.grpc.scheduler.HealthCheckRequest", "sglang.grpc.scheduler.HealthCheckResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "Abort", "sglang.grpc.scheduler.AbortRequest", "sglang.grpc.scheduler.AbortResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "GetModelInfo", "sglang.grpc.scheduler.GetModelInfoRequest", "sglang.grpc.scheduler.GetModelInfoResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "GetServerInfo", "sglang.grpc.scheduler.GetServerInfoRequest", "sglang.grpc.scheduler.GetServerInfoResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "GetLoads", "sglang.grpc.scheduler.GetLoadsRequest", "sglang.grpc.scheduler.GetLoadsResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "FlushCache", "smg.grpc.common.FlushCacheRequest", "smg.grpc.common.FlushCacheResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "StartProfile", "smg.grpc.common.StartProfileRequest", "smg.grpc.common.ProfileResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "StopProfile", "smg.grpc.common.StopProfileRequest", "smg.grpc.common.ProfileResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "GetTokenizer", "smg.grpc.common.GetTokenizerRequest", "smg.grpc.common.GetTokenizerChunk", true},
	{"sglang.grpc.scheduler.SglangScheduler", "SubscribeKvEvents", "smg.grpc.common.SubscribeKvEventsRequest", "smg.grpc.common.KvEventBatch", true},
	{"sglang.grpc.scheduler.SglangScheduler", "LoadLoRAAdapter", "sglang.grpc.scheduler.LoadLoRAAdapterRequest", "sglang.grpc.scheduler.LoadLoRAAdapterResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "UnloadLoRAAdapter", "sglang.grpc.scheduler.UnloadLoRAAdapterRequest", "sglang.grpc.scheduler.UnloadLoRAAdapterResponse", false},
	{"sglang.grpc.scheduler.SglangScheduler", "ListLoadedLoRAAdapters", "sglang.grpc.scheduler.ListLoadedLoRAAdaptersRequest", "sglang.grpc.scheduler.ListLoadedLoRAAdaptersResponse", false},
	{"vllm.grpc.engine.VllmEngine", "Generate", "vllm.grpc.engine.GenerateRequest", "vllm.grpc.engine.GenerateResponse", true},
	{"vllm.grpc.engine.VllmEngine", "Embed", "vllm.grpc.engine.EmbedRequest", "vllm.grpc.engine.EmbedResponse", false},
	{"vllm.grpc.engine.VllmEngine", "HealthCheck", "vllm.grpc.engine.HealthCheckRequest", "vllm.grpc.engine.HealthCheckResponse", false},
	{"vllm.grpc.engine.VllmEngine", "Abort", "vllm.grpc.engine.AbortRequest", "vllm.grpc.engine.AbortResponse", false},
	{"vllm.grpc.engine.VllmEngine", "GetModelInfo", "vllm.grpc.engine.GetModelInfoRequest", "vllm.grpc.engine.GetModelInfoResponse", false},
	{"vllm.grpc.engine.VllmEngine", "GetServerInfo", "vllm.grpc.engine.GetServerInfoRequest", "vllm.grpc.engine.GetServerInfoResponse", false},
	{"vllm.grpc.engine.VllmEngine", "GetLoads", "vllm.grpc.engine.GetLoadsRequest", "vllm.grpc.engine.GetLoadsResponse", false},
	{"vllm.grpc.engine.VllmEngine", "GetTokenizer", "smg.grpc.common.GetTokenizerRequest", "smg.grpc.common.GetTokenizerChunk", true},
	{"vllm.grpc.engine.VllmEngine", "SubscribeKvEvents", "smg.grpc.common.SubscribeKvEventsRequest", "smg.grpc.common.KvEventBatch", true},
	{"trtllm.TrtllmService", "Generate", "trtllm.GenerateRequest", "trtllm.GenerateResponse", true},
	{"trtllm.TrtllmService", "Embed", "trtllm.EmbedRequest", "trtllm.EmbedResponse", false},
	{"trtllm.TrtllmService", "HealthCheck", "trtllm.HealthCheckRequest", "trtllm.HealthCheckResponse", false},
	{"trtllm.TrtllmService", "Abort", "trtllm.AbortRequest", "trtllm.AbortResponse", false},
	{"trtllm.TrtllmService", "GetModelInfo", "trtllm.GetModelInfoRequest", "trtllm.GetModelInfoResponse", false},
	{"trtllm.TrtllmService", "GetServerInfo", "trtllm.GetServerInfoRequest", "trtllm.GetServerInfoResponse", false},
	{"trtllm.TrtllmService", "GetTokenizer", "smg.grpc.common.GetTokenizerRequest", "smg.grpc.common.GetTokenizerChunk", true},
	{"trtllm.TrtllmService", "SubscribeKvEvents", "smg.grpc.common.SubscribeKvEventsRequest", "smg.grpc.common.KvEventBatch", true},
}
