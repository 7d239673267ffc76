package dispatch

import "testing"

func TestWithModelAndExposedModel(t *testing.T) {
	t.Parallel()
	in := `{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}],"model" : "chat","stream":true}`
	got, err := withModel([]byte(in), "llama-3.1-8b-rc")
	want := `{"messages":[{"role":"user","content":"{\"model\":\"x\"}"}],"model" : "llama-3.1-8b-rc","stream":true}`
	if err != nil || string(got) != want {
		t.Fatalf("withModel = %s, %v\nwant %s", got, err, want)
	}
	if _, err := withModel([]byte(`{"prompt":"p"}`), "m"); err == nil {
		t.Fatal("withModel of a body without model: no error")
	}
	frame := `{"id":"1","model":"llama-3.1-8b-rc","choices":[{"delta":{"content":"\"model\":\"q\""}}]}`
	if got := exposedModel([]byte(frame), "chat"); string(got) != `{"id":"1","model":"chat","choices":[{"delta":{"content":"\"model\":\"q\""}}]}` {
		t.Fatalf("exposedModel = %s", got)
	}
	for _, keep := range []string{"[DONE]", `{"id":"1"}`, `not json`} {
		if got := exposedModel([]byte(keep), "chat"); string(got) != keep {
			t.Errorf("exposedModel(%s) = %s, want it unchanged", keep, got)
		}
	}
}
