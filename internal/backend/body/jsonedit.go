package body

import (
	"fmt"

	"github.com/sluicegw/sluice/internal/jsonscan"
)

// field is one top-level edit: set key to the raw JSON value, or delete key when value is nil.
type field struct {
	key   string
	value []byte
}

// maxEdits bounds one rewrite so applied edits fit a bitmask.
const maxEdits = 64

// rewriteObject applies edits to the top-level members of the JSON object in body and returns a new
// slice (body is not modified). Every member the edits do not name is copied byte-for-byte, including
// the whitespace around it. A set replaces the value of every member with that key (so duplicate keys
// cannot smuggle an old value past either a first-wins or a last-wins parser) or, when the key is
// absent, appends `"key":value` before the closing brace. A delete removes every member with that key
// together with one adjacent separator. body must be exactly one JSON object.
func rewriteObject(body []byte, edits []field) ([]byte, error) {
	if len(edits) > maxEdits {
		return nil, fmt.Errorf("backend: %d edits in one rewrite (max %d)", len(edits), maxEdits)
	}
	var stack [48]jsonscan.Member
	members := stack[:0]
	it := jsonscan.NewObjIter(body, 0)
	extra := 0
	for {
		m, ok := it.Next()
		if !ok {
			break
		}
		members = append(members, m)
	}
	if it.Err != nil {
		return nil, it.Err
	}
	if jsonscan.SkipWS(body, it.Close+1) != len(body) {
		return nil, jsonscan.SyntaxError("trailing data after object", it.Close+1)
	}
	for _, e := range edits {
		extra += len(e.key) + len(e.value) + 4
	}
	out := make([]byte, 0, len(body)+extra)

	var applied uint64
	wrote := false
	if len(members) == 0 {
		out = append(out, body[:it.Close]...)
	} else {
		out = append(out, body[:members[0].KeyStart]...)
	}
	for j, m := range members {
		idx := -1
		for k := range edits {
			if m.KeyIs(body, edits[k].key) {
				idx = k
				break
			}
		}
		if idx >= 0 && edits[idx].value == nil {
			applied |= 1 << idx
			continue
		}
		if wrote {
			out = append(out, body[members[j-1].ValEnd:m.KeyStart]...)
		}
		if idx >= 0 {
			applied |= 1 << idx
			out = append(out, body[m.KeyStart:m.ValStart]...)
			out = append(out, edits[idx].value...)
		} else {
			out = append(out, body[m.KeyStart:m.ValEnd]...)
		}
		wrote = true
	}
	for k, e := range edits {
		if applied&(1<<k) != 0 || e.value == nil {
			continue
		}
		if wrote {
			out = append(out, ',')
		}
		out = append(out, '"')
		out = append(out, e.key...)
		out = append(out, '"', ':')
		out = append(out, e.value...)
		wrote = true
	}
	if len(members) == 0 {
		out = append(out, body[it.Close:]...)
	} else {
		out = append(out, body[members[len(members)-1].ValEnd:]...)
	}
	return out, nil
}
