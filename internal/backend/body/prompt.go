package body

import (
	"fmt"

	"github.com/sluicegw/sluice/internal/jsonscan"
	"github.com/sluicegw/sluice/internal/reqcheck"
)

// parseMessages reads the messages array at body[start] in one validating pass: it must be a
// non-empty array of objects; the text of their contents (string contents and the text of "text"
// parts) is collected into req.Text, joined by single spaces. It returns the end of the array, a
// validation error, or a syntax error (malformed JSON).
func parseMessages(req *Request, body []byte, start int) (end int, rerr *RequestError, serr error) {
	if start >= len(body) || body[start] != '[' {
		if _, serr = jsonscan.SkipValueDepth(body, start, 1); serr != nil {
			return 0, nil, serr
		}
		return 0, invalid("messages", "messages must be an array"), nil
	}
	text := make([]byte, 0, 1024)
	count := 0
	i := jsonscan.SkipWS(body, start+1)
	for i >= len(body) || body[i] != ']' {
		if count > 0 {
			if i >= len(body) || body[i] != ',' {
				return 0, nil, jsonscan.SyntaxError("expected ',' or ']'", i)
			}
			i = jsonscan.SkipWS(body, i+1)
		}
		if i >= len(body) || body[i] != '{' {
			if _, serr = jsonscan.SkipValueDepth(body, i, 2); serr != nil {
				return 0, nil, serr
			}
			return 0, invalid(fmt.Sprintf("messages[%d]", count), "messages[%d] must be an object", count), nil
		}
		msg := jsonscan.NewObjIter(body, i)
		sawRole := false
		for {
			m, ok := msg.Next()
			if !ok {
				break
			}
			switch {
			case m.KeyIs(body, "role"):
				sawRole = true
				if e := reqcheck.Role(count, m.Value(body)); e != nil {
					return 0, checked(e), nil
				}
			case m.KeyIs(body, "content"):
				if e := reqcheck.Content(count, m.Value(body)); e != nil {
					return 0, checked(e), nil
				}
				var e *reqcheck.Error
				if text, e = appendContentText(text, body, m, count); e != nil {
					return 0, checked(e), nil
				}
			}
		}
		if msg.Err != nil {
			return 0, nil, msg.Err
		}
		if e := reqcheck.MessageDone(count, sawRole); e != nil {
			return 0, checked(e), nil
		}
		count++
		i = jsonscan.SkipWS(body, msg.Close+1)
	}
	if count == 0 {
		return 0, invalid("messages", "messages must not be empty"), nil
	}
	req.Text = string(text)
	req.PromptChars = len(text)
	return i + 1, nil, nil
}

// appendContentText appends the text of messages[msg].content: a string, or the "text" of text
// parts. A part that is not an object is refused.
func appendContentText(text, body []byte, m jsonscan.Member, msg int) ([]byte, *reqcheck.Error) {
	raw := m.Value(body)
	switch raw[0] {
	case '"':
		if len(text) > 0 {
			text = append(text, ' ')
		}
		text, _ = jsonscan.AppendUnquoted(text, raw)
	case '[':
		parts := jsonscan.NewArrIter(body, m.ValStart)
		for j := 0; ; j++ {
			ps, pe, ok := parts.Next()
			if !ok {
				break
			}
			if body[ps] != '{' {
				return text, reqcheck.ContentPart(msg, j, body[ps:pe])
			}
			if t, ok := jsonscan.FindMember(body, ps, "text"); ok && body[t.ValStart] == '"' {
				if len(text) > 0 {
					text = append(text, ' ')
				}
				text, _ = jsonscan.AppendUnquoted(text, t.Value(body))
			}
		}
	}
	return text, nil
}

// parsePrompt handles OpenAI completions' prompt: a string, an array of strings (a batch), an array
// of token ids (one prompt), or an array of token arrays (a batch).
func parsePrompt(req *Request, body []byte, m jsonscan.Member, param string) *RequestError {
	raw := m.Value(body)
	switch raw[0] {
	case 'n':
		return nil
	case '"':
		req.Text, _ = jsonscan.Unquote(raw)
		req.PromptChars = len(req.Text)
		return nil
	case '[':
	default:
		return invalid(param, "%s must be a string or an array", param)
	}
	arr := jsonscan.NewArrIter(body, m.ValStart)
	n := 0
	batched := false
	for {
		s, e, ok := arr.Next()
		if !ok {
			break
		}
		switch body[s] {
		case '"':
			if n == 0 {
				req.Text, _ = jsonscan.Unquote(body[s:e])
			}
			req.PromptChars += e - s - 2 // the raw string's length: escapes count a little extra
			batched = true
		case '[':
			req.PromptTokenIDs += countElems(body, s)
			batched = true
		case '-', '0', '1', '2', '3', '4', '5', '6', '7', '8', '9':
			req.PromptTokenIDs++
		default:
			return invalid(param, "%s[%d] must be a string, a token id or an array of token ids", param, n)
		}
		n++
	}
	if n == 0 {
		return invalid(param, "%s must not be empty", param)
	}
	if batched {
		req.BatchSize = n
	}
	return nil
}

// parseGenerateText handles /generate's text: a string or a list of strings (a batch).
func parseGenerateText(req *Request, body []byte, m jsonscan.Member) *RequestError {
	raw := m.Value(body)
	switch raw[0] {
	case 'n':
		return nil
	case '"':
		req.Text, _ = jsonscan.Unquote(raw)
		req.PromptChars = len(req.Text)
		return nil
	case '[':
	default:
		return invalid("text", "text must be a string or an array of strings")
	}
	arr := jsonscan.NewArrIter(body, m.ValStart)
	n := 0
	for {
		s, e, ok := arr.Next()
		if !ok {
			break
		}
		if body[s] != '"' {
			return invalid("text", "text[%d] must be a string", n)
		}
		if n == 0 {
			req.Text, _ = jsonscan.Unquote(body[s:e])
		}
		req.PromptChars += e - s - 2
		n++
	}
	if n == 0 {
		return invalid("text", "text must not be empty")
	}
	req.BatchSize = n
	return nil
}

// parseInputIDs handles /generate's input_ids: a list of ids, or a list of lists (a batch).
func parseInputIDs(req *Request, body []byte, m jsonscan.Member) *RequestError {
	raw := m.Value(body)
	if raw[0] == 'n' {
		return nil
	}
	if raw[0] != '[' {
		return invalid("input_ids", "input_ids must be an array")
	}
	arr := jsonscan.NewArrIter(body, m.ValStart)
	n := 0
	batched := false
	for {
		s, _, ok := arr.Next()
		if !ok {
			break
		}
		if body[s] == '[' {
			batched = true
			req.PromptTokenIDs += countElems(body, s)
		} else {
			req.PromptTokenIDs++
		}
		n++
	}
	if n == 0 {
		return invalid("input_ids", "input_ids must not be empty")
	}
	if batched {
		req.BatchSize = n
	}
	return nil
}

// countElems counts the elements of the (already validated) array at body[start].
func countElems(body []byte, start int) int {
	arr := jsonscan.NewArrIter(body, start)
	n := 0
	for {
		if _, _, ok := arr.Next(); !ok {
			return n
		}
		n++
	}
}
