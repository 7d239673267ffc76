package cli

import (
	"strings"
	"testing"
	"time"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

func TestSetDecodeLimit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in        string
		wantLimit *int32
		wantAuto  *bool
	}{
		{"8", ptr(int32(8)), ptr(false)},
		{"auto", nil, ptr(true)},
		{"off", ptr(int32(0)), ptr(false)},
	} {
		req := &adminv1.UpdateAdmissionRequest{}
		if err := setDecodeLimit(req, tc.in); err != nil {
			t.Fatalf("%s: %v", tc.in, err)
		}
		if (tc.wantLimit == nil) != (req.DecodeMaxInflightPerWorker == nil) ||
			(tc.wantLimit != nil && *tc.wantLimit != req.GetDecodeMaxInflightPerWorker()) ||
			*tc.wantAuto != req.GetDecodeAuto() || req.DecodeAuto == nil {
			t.Errorf("%s: got limit %v auto %v", tc.in, req.DecodeMaxInflightPerWorker, req.DecodeAuto)
		}
	}
	if err := setDecodeLimit(&adminv1.UpdateAdmissionRequest{}, "many"); err == nil {
		t.Error("--decode-limit many accepted")
	}
}

func ptr[T any](v T) *T { return &v }

// sluice top sums a data-parallel decode engine's rank seats into its row.
func TestTopShowsDecodeSeats(t *testing.T) {
	t.Parallel()
	s := &topSnapshot{at: time.Unix(0, 0), admission: &adminv1.AdmissionStatus{
		Enabled:  true,
		Settings: &adminv1.AdmissionSettings{MaxInflightPerWorker: 4, QueueSize: 8, DecodeMaxInflightPerWorker: 2},
		DecodeWorkers: []*adminv1.DecodeSeats{
			{Worker: "http://d:1@0", Inflight: 2, Limit: 2},
			{Worker: "http://d:1@1", Inflight: 1, Limit: 2},
		},
	}, workers: []*adminv1.Worker{{Id: "d", Url: "http://d:1", Role: "decode", Health: "ready"}}}
	out := renderTop("http://gw", s, nil)
	if !strings.Contains(out, "decode seats 2 per decode worker") || !strings.Contains(out, "SEATS") || !strings.Contains(out, "3/4 [#######...]") {
		t.Fatalf("top does not show the decode seats:\n%s", out)
	}
}
