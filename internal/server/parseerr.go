package server

import (
	"regexp"
	"strings"
	"unicode"

	"github.com/sluicegw/sluice/internal/apierror"
)

// protojson reports a body it cannot read in its own terms ("proto: (line 1:19): invalid value for
// uint32 field bootstrapPort: -1"); grpc-gateway passes that on as the admin REST answer. These
// patterns restate it in the client's terms: the field's JSON name, what it must be, where.
var (
	protoPosition     = regexp.MustCompile(`^(syntax error )?\(line (\d+):(\d+)\): (.*)$`)
	protoInvalidValue = regexp.MustCompile(`^invalid value for (\w+) field (\w+): (.*)$`)
	protoUnknownField = regexp.MustCompile(`^unknown field "([^"]*)"$`)
)

// want says what a protobuf scalar type accepts in JSON.
var want = map[string]string{
	"string": "a string", "bool": "true or false", "bytes": "a base64 string",
	"int32": "an integer", "int64": "an integer", "sint32": "an integer", "sint64": "an integer",
	"uint32": "a non-negative integer", "uint64": "a non-negative integer",
	"fixed32": "a non-negative integer", "fixed64": "a non-negative integer",
	"float": "a number", "double": "a number", "enum": "one of the allowed names",
}

// plainParseError rewrites a protojson parse error in e into plain language, naming the field in
// param (status and code stay); any other error is returned as is.
func plainParseError(e *apierror.Error) *apierror.Error {
	// protobuf-go picks a space or a no-break space after "proto:" at random, so that nobody matches
	// its messages exactly; the patterns below only restate them and fall back to the text as is.
	msg, ok := strings.CutPrefix(e.Message, "proto:")
	msg = strings.TrimLeft(msg, " \u00a0")
	if !ok && e.Message != "unexpected EOF" { // a truncated body fails before protojson sees it
		return e
	}
	out := *e
	if msg == "unexpected EOF" {
		out.Message = "the request body is not complete JSON: it ends early"
		return &out
	}
	m := protoPosition.FindStringSubmatch(msg)
	if m == nil {
		out.Message = "the request body could not be read: " + msg
		return &out
	}
	where := " (line " + m[2] + ", column " + m[3] + ")"
	detail := m[4]
	switch {
	case m[1] != "":
		out.Message = "the request body is not valid JSON for this call: " + detail + where
	case protoUnknownField.MatchString(detail):
		f := protoUnknownField.FindStringSubmatch(detail)[1]
		out.Param = f
		out.Message = "unknown field \"" + f + "\"" + where
	case protoInvalidValue.MatchString(detail):
		v := protoInvalidValue.FindStringSubmatch(detail)
		field := snake(v[2])
		kind := want[v[1]]
		if kind == "" {
			kind = "a " + v[1]
		}
		out.Param = field
		out.Message = "field " + field + " must be " + kind + ", got " + v[3] + where
	default:
		out.Message = "the request body could not be read: " + detail + where
	}
	return &out
}

// snake turns protojson's lowerCamelCase JSON name back into the proto (and API) name.
func snake(s string) string {
	var b strings.Builder
	for _, r := range s {
		if unicode.IsUpper(r) {
			b.WriteByte('_')
			r = unicode.ToLower(r)
		}
		b.WriteRune(r)
	}
	return b.String()
}
