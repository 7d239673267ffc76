package server

import (
	"bytes"
	"encoding/json"
	"io"

	"github.com/grpc-ecosystem/grpc-gateway/v2/runtime"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

// adminJSON is the admin REST marshaler: protojson, with one accommodation on the way in. GET
// /admin/v1/admission reports the priority bands as a list ("priority_bands": [...]), while the PATCH
// body's priority_bands is a message wrapping that list ({"bands": [...]}), so that an absent field
// (keep the bands) differs from an empty list (no bands). A PATCH also takes the list form, so that
// the settings GET returns can be sent back unchanged.
type adminJSON struct{ *runtime.JSONPb }

func (m adminJSON) NewDecoder(r io.Reader) runtime.Decoder {
	return runtime.DecoderFunc(func(v any) error {
		if _, ok := v.(*adminv1.UpdateAdmissionRequest); !ok {
			return m.JSONPb.NewDecoder(r).Decode(v)
		}
		body, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		return m.JSONPb.NewDecoder(bytes.NewReader(bandsAsList(body))).Decode(v)
	})
}

// bandsAsList rewrites a top-level "priority_bands" (or "priorityBands") list into {"bands": list}; any
// other body, malformed ones included, is returned as it is for protojson to judge.
func bandsAsList(body []byte) []byte {
	var fields map[string]json.RawMessage
	if json.Unmarshal(body, &fields) != nil {
		return body
	}
	changed := false
	for _, k := range []string{"priority_bands", "priorityBands"} {
		if v, ok := fields[k]; ok && len(bytes.TrimSpace(v)) > 0 && bytes.TrimSpace(v)[0] == '[' {
			fields[k] = append(append([]byte(`{"bands":`), v...), '}')
			changed = true
		}
	}
	if !changed {
		return body
	}
	out, err := json.Marshal(fields)
	if err != nil {
		return body
	}
	return out
}
