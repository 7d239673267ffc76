package sim

import (
	"encoding/json"
	"strings"

	sglangpb "github.com/sluicegw/sluice/gen/sglang/grpc/scheduler"
	trtllmpb "github.com/sluicegw/sluice/gen/trtllm"
	vllmpb "github.com/sluicegw/sluice/gen/vllm/grpc/engine"
)

// Structured output over the engines' gRPC: SamplingParams' constraint oneof (SGLang: regex,
// json_schema, ebnf_grammar, structural_tag; vLLM: json_schema, regex, grammar, structural_tag,
// json_object, choice; TensorRT-LLM: guided_decoding's guide type and guide). The simulator keeps the last constraint it was given, by the proto field's
// name (Stats.LastConstraint, GET /sim/stats), so a test can tell a dropped or misrouted one, and it
// honours the JSON ones as a grammar-constrained engine does: the output is one JSON object, and once
// the object is closed the grammar allows only the EOS, so the sample ends with "stop". The other
// constraints are recorded, not modelled (their output is the model's usual words).

// Constraint is a Generate call's structured-output constraint: the proto's oneof field and its value
// ("true" for vLLM's json_object, the choices as a JSON list for vLLM's choice).
type Constraint struct {
	Field string `json:"field"`
	Value string `json:"value"`
}

// jsonConstrained says whether the constraint makes the output one JSON object.
func (c *Constraint) jsonConstrained() bool {
	if c == nil {
		return false
	}
	switch c.Field {
	case "json_schema", "json_object", "guided_decoding.json", "guided_decoding.json_schema":
		return true
	}
	return false
}

func sglangConstraint(p *sglangpb.SamplingParams) *Constraint {
	switch k := p.GetConstraint().(type) {
	case *sglangpb.SamplingParams_Regex:
		return &Constraint{"regex", k.Regex}
	case *sglangpb.SamplingParams_JsonSchema:
		return &Constraint{"json_schema", k.JsonSchema}
	case *sglangpb.SamplingParams_EbnfGrammar:
		return &Constraint{"ebnf_grammar", k.EbnfGrammar}
	case *sglangpb.SamplingParams_StructuralTag:
		return &Constraint{"structural_tag", k.StructuralTag}
	}
	return nil
}

func vllmConstraint(p *vllmpb.SamplingParams) *Constraint {
	switch k := p.GetConstraint().(type) {
	case *vllmpb.SamplingParams_JsonSchema:
		return &Constraint{"json_schema", k.JsonSchema}
	case *vllmpb.SamplingParams_Regex:
		return &Constraint{"regex", k.Regex}
	case *vllmpb.SamplingParams_Grammar:
		return &Constraint{"grammar", k.Grammar}
	case *vllmpb.SamplingParams_StructuralTag:
		return &Constraint{"structural_tag", k.StructuralTag}
	case *vllmpb.SamplingParams_JsonObject:
		if k.JsonObject {
			return &Constraint{"json_object", "true"}
		}
	case *vllmpb.SamplingParams_Choice:
		b, _ := json.Marshal(k.Choice.GetChoices())
		return &Constraint{"choice", string(b)}
	}
	return nil
}

// trtllmConstraint reads TensorRT-LLM's guided_decoding as "guided_decoding.<guide type>" (json,
// json_schema, regex, ebnf_grammar, structural_tag). The servicer ignores a guide whose text is empty.
func trtllmConstraint(g *trtllmpb.GuidedDecodingParams) *Constraint {
	if g.GetGuide() == "" {
		return nil
	}
	kind := strings.ToLower(strings.TrimPrefix(g.GetGuideType().String(), "GUIDE_TYPE_"))
	return &Constraint{"guided_decoding." + kind, g.GetGuide()}
}

// checkConstraint refuses what the engines' grammar backends cannot compile and notes the constraint.
// A JSON schema that is not JSON is the one refusal modelled (SGLang aborts the request with "Invalid
// grammar request", vLLM's processor raises a ValueError: a 400 either way).
func (e *Engine) checkConstraint(c *Constraint) error {
	if c == nil {
		return nil
	}
	if (c.Field == "json_schema" || c.Field == "guided_decoding.json_schema") && !json.Valid([]byte(c.Value)) {
		return rpcError(requestError("", "Invalid grammar request: the JSON schema is not valid JSON"))
	}
	e.stats.mu.Lock()
	e.stats.lastConstraint = c
	e.stats.mu.Unlock()
	e.stats.constrained.Add(1)
	return nil
}

// objectWords is how many of the model's words the simulated JSON object holds, in its one string.
const objectWords = 3

// jsonObject turns a sample's words into one JSON object, a token at a time: its opening
// `{"text":"`, objectWords words (plain lowercase letters, safe in a JSON string), its closing `"}`.
// A budget shorter than that truncates the object, as on the engines (finish "length").
type jsonObject struct {
	next func() (string, uint32)
	i    int
}

func (j *jsonObject) pick() (string, uint32) {
	j.i++
	switch {
	case j.i == 1:
		return `{"text":"`, '{'
	case j.i <= objectWords+1:
		return j.next()
	}
	return `"}`, '}'
}

// closed says the object is complete: the grammar allows only the EOS now.
func (j *jsonObject) closed() bool { return j.i > objectWords+1 }
