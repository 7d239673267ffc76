package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"reflect"
	"testing"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/gen/sluice/admin/v1/adminv1connect"
	"github.com/sluicegw/sluice/internal/app"
)

// restSettings is the settings object of GET /admin/v1/admission, as raw JSON and decoded.
func restSettings(t *testing.T, gw *gateway) (json.RawMessage, map[string]any) {
	t.Helper()
	resp, body := get(t, gw.URL+"/admin/v1/admission")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET admission: %d %s", resp.StatusCode, body)
	}
	var st struct {
		Settings json.RawMessage `json:"settings"`
	}
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("GET admission body: %v\n%s", err, body)
	}
	var m map[string]any
	if err := json.Unmarshal(st.Settings, &m); err != nil {
		t.Fatal(err)
	}
	return st.Settings, m
}

func patchAdmission(t *testing.T, gw *gateway, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPatch, gw.URL+"/admin/v1/admission", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("PATCH admission: %v", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestAdmissionSettingsRoundTrip: the settings GET /admin/v1/admission returns are a valid PATCH body
// that changes nothing (off is 0, the bands a list), on a gateway with admission off and on one with
// every kind of setting; -1 is taken as off (0) by REST and the CLI alike; the typed RPC round-trips too.
func TestAdmissionSettingsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		args []string
	}{
		{"defaults", nil},
		{"off by -1 flags", []string{"--prefill-max-inflight-requests-per-worker", "-1", "--prefill-max-inflight-tokens-per-worker", "-1"}},
		{"every setting", []string{"--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "4",
			"--prefill-max-inflight-tokens-per-worker", "5000", "--prefill-priority-bands", "low:-10,default:0,high:10",
			"--prefill-priority-aging-secs", "3", "--prefill-early-rejection", "--prefill-adaptive-limit", "2:8",
			"--decode-max-inflight-requests-per-worker", "auto"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			gw := startGateway(t, app.Options{}, tc.args...)
			raw, before := restSettings(t, gw)
			for _, k := range []string{"max_inflight_per_worker", "max_inflight_tokens_per_worker", "decode_max_inflight_per_worker"} {
				if n, _ := before[k].(float64); n < 0 {
					t.Errorf("GET reports %s %v: off is 0", k, before[k])
				}
			}
			if code, body := patchAdmission(t, gw, raw); code != http.StatusOK {
				t.Fatalf("PATCH of GET's settings %s: %d %s", raw, code, body)
			}
			if _, after := restSettings(t, gw); !reflect.DeepEqual(before, after) {
				t.Fatalf("PATCH of GET's settings changed them:\nbefore %v\nafter  %v", before, after)
			}

			// The typed RPC: the settings as an update request.
			c := adminv1connect.NewAdminServiceClient(http.DefaultClient, gw.URL)
			got, err := c.GetAdmission(t.Context(), &adminv1.GetAdmissionRequest{})
			if err != nil {
				t.Fatal(err)
			}
			s := got.GetStatus().GetSettings()
			upd := &adminv1.UpdateAdmissionRequest{
				MaxInflightPerWorker: new(s.GetMaxInflightPerWorker()), QueueSize: new(s.GetQueueSize()), QueueTimeout: s.GetQueueTimeout(),
				MaxInflightTokensPerWorker: new(s.GetMaxInflightTokensPerWorker()), PriorityBands: &adminv1.PriorityBandList{Bands: s.GetPriorityBands()},
				PriorityAging: s.GetPriorityAging(), EarlyRejection: new(s.GetEarlyRejection()), AdaptiveLimit: s.GetAdaptiveLimit(),
				DecodeMaxInflightPerWorker: new(s.GetDecodeMaxInflightPerWorker()), DecodeAuto: new(s.GetDecodeAuto()),
			}
			if _, err := c.UpdateAdmission(t.Context(), upd); err != nil {
				t.Fatalf("UpdateAdmission with GetAdmission's settings: %v", err)
			}
			if _, after := restSettings(t, gw); !reflect.DeepEqual(before, after) {
				t.Fatalf("UpdateAdmission with GetAdmission's settings changed them:\nbefore %v\nafter  %v", before, after)
			}
		})
	}

	t.Run("-1 is off", func(t *testing.T) {
		t.Parallel()
		gw := startGateway(t, app.Options{}, "--pd-disaggregation", "--prefill-max-inflight-requests-per-worker", "3")
		if code, body := patchAdmission(t, gw, []byte(`{"max_inflight_per_worker": -1, "max_inflight_tokens_per_worker": -1}`)); code != http.StatusOK {
			t.Fatalf("PATCH -1: %d %s", code, body)
		}
		if _, s := restSettings(t, gw); s["max_inflight_per_worker"] != 0.0 || s["max_inflight_tokens_per_worker"] != 0.0 {
			t.Fatalf("after PATCH -1: %v", s)
		}
		runCLI(t, 0, "admission", "set", "--server", gw.URL, "--limit", "3")
		runCLI(t, 0, "admission", "set", "--server", gw.URL, "--limit", "-1", "--token-limit", "-1")
		if _, s := restSettings(t, gw); s["max_inflight_per_worker"] != 0.0 {
			t.Fatalf("after admission set --limit -1: %v", s)
		}
	})
}
