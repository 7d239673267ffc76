package config

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestKVEventsEndpoint(t *testing.T) {
	const spec = "tcp://127.0.0.1:5557?replay=tcp://127.0.0.1:5558&dp=2"
	tests := []struct {
		name    string
		args    []string
		want    map[string]string
		wantErr string
	}{
		{name: "none", args: []string{"--worker-urls", "http://w:1"}},
		{name: "one, trailing slash dropped", args: []string{"--worker-urls", "http://w:1", "--kv-events-endpoint", "http://w:1/=" + spec},
			want: map[string]string{"http://w:1": spec}},
		{name: "pd", args: []string{"--pd-disaggregation", "--prefill", "http://p:1", "--decode", "http://d:1", "--kv-events-endpoint", "http://p:1=tcp://p:5557"},
			want: map[string]string{"http://p:1": "tcp://p:5557"}},
		{name: "not a flag worker", args: []string{"--worker-urls", "http://w:1", "--kv-events-endpoint", "http://x:1=tcp://x:5557"}, wantErr: "not a worker given by"},
		{name: "twice", args: []string{"--worker-urls", "http://w:1", "--kv-events-endpoint", "http://w:1=tcp://w:1", "--kv-events-endpoint", "http://w:1=tcp://w:2"}, wantErr: "given twice"},
		{name: "no spec", args: []string{"--worker-urls", "http://w:1", "--kv-events-endpoint", "http://w:1"}, wantErr: "want WORKER_URL="},
		{name: "not tcp", args: []string{"--worker-urls", "http://w:1", "--kv-events-endpoint", "http://w:1=ipc:///tmp/x"}, wantErr: "want tcp://"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse(tt.args, io.Discard)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse: %v, want an error containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, c.KVEvents.Endpoints); diff != "" {
				t.Errorf("KVEvents.Endpoints (-want +got):\n%s", diff)
			}
		})
	}
}

func TestKVEventsRetry(t *testing.T) {
	c, err := Parse([]string{"--worker-urls", "http://w:1", "--kv-events-retry-secs", "0.05"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if c.KVEvents.RetryInterval != 50*time.Millisecond {
		t.Errorf("RetryInterval %v, want 50ms", c.KVEvents.RetryInterval)
	}
	if c, err := Parse([]string{"--worker-urls", "http://w:1"}, io.Discard); err != nil || c.KVEvents.RetryInterval != 0 {
		t.Errorf("default: %v, %v; want 0 (the subscriber's own default)", c.KVEvents.RetryInterval, err)
	}
	if _, err := Parse([]string{"--worker-urls", "http://w:1", "--kv-events-retry-secs", "-1"}, io.Discard); err == nil || !strings.Contains(err.Error(), "kv-events-retry-secs") {
		t.Errorf("negative: %v, want an error naming the flag", err)
	}
}
