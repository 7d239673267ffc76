package body

import (
	"encoding/json"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// What a floor above needs to turn a body into another wire format (workerrpc builds worker-protocol
// messages from it) without a scanner of its own.

// TopMembers returns a JSON object's non-null top-level members by key, a later duplicate replacing
// an earlier one. The error is the scanner's, as a *RequestError would quote it.
func TopMembers(b []byte) (map[string]json.RawMessage, error) {
	fields := map[string]json.RawMessage{}
	it := jsonscan.NewObjIter(b, 0)
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		if v := m.Value(b); !jsonscan.IsNull(v) {
			fields[m.Key(b)] = v
		}
	}
	return fields, it.Err
}

// IsNull reports whether raw is the JSON literal null.
func IsNull(raw []byte) bool { return jsonscan.IsNull(raw) }

// Invalid is the 400 answer for one parameter: param names it, the message is formatted.
func Invalid(param, format string, args ...any) *RequestError {
	return invalid(param, format, args...)
}

// SetMember is body, a JSON object, with its top-level member key set to the raw JSON value (added
// when absent); every other member is kept byte for byte.
func SetMember(body []byte, key string, value []byte) ([]byte, error) {
	return rewriteObject(body, []field{{key, value}})
}
