package kvspec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
)

func TestParse(t *testing.T) {
	t.Parallel()
	const w = "http://10.0.0.5:8000"
	tests := []struct {
		spec    string
		want    []kvspec.Endpoint
		wantErr string
	}{
		{spec: "tcp://10.0.0.5:5557", want: []kvspec.Endpoint{{Worker: w, Publisher: "tcp://10.0.0.5:5557"}}},
		{spec: "tcp://e:5557?replay=tcp://e:5558&topic=kv&dp=2", want: []kvspec.Endpoint{
			{Worker: w, Rank: 0, Publisher: "tcp://e:5557", Replay: "tcp://e:5558", Topic: "kv"},
			{Worker: w, Rank: 1, Publisher: "tcp://e:5558", Replay: "tcp://e:5559", Topic: "kv"},
		}},
		{spec: "tcp://[::1]:5557", want: []kvspec.Endpoint{{Worker: w, Publisher: "tcp://[::1]:5557"}}},
		{spec: "tcp://*:5557", wantErr: "bind address"},
		{spec: "tcp://:5557", wantErr: "bind address"},
		{spec: "http://e:5557", wantErr: "want tcp://"},
		{spec: "tcp://e", wantErr: "missing port"},
		{spec: "tcp://e:0", wantErr: "out of range"},
		{spec: "tcp://e:5557?dp=0", wantErr: "dp"},
		{spec: "tcp://e:5557?dp=x", wantErr: "dp"},
		{spec: "tcp://e:65535?dp=2", wantErr: "beyond 65535"},
		{spec: "tcp://e:5557?replay=e:5558", wantErr: "replay endpoint"},
		{spec: "tcp://e:5557?hwm=1", wantErr: "unknown parameter"},
		{spec: "tcp://e:5557/path", wantErr: "want tcp://"},
	}
	for _, tc := range tests {
		t.Run(tc.spec, func(t *testing.T) {
			t.Parallel()
			got, err := kvspec.Parse(w, tc.spec)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !errors.Is(err, kvspec.ErrConfig) {
					t.Fatalf("err = %v, want ErrConfig containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tc.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}
