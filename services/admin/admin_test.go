package admin

import (
	"bytes"
	"context"
	"log/slog"
	"reflect"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/worker"
)

// newTestService is the admin API over a real registry and admission controller; logs go to the
// returned buffer (the registry's and the service's alike, as in the gateway).
func newTestService(t *testing.T, pd bool) (*Service, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true, Logger: logger})
	adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 2, QueueSize: 10, QueueTimeout: time.Second}, admission.Deps{})
	if err != nil {
		t.Fatal(err)
	}
	s := New(Deps{Registry: reg, Admission: adm, Logger: logger, PD: pd})
	t.Cleanup(s.Close)
	return s, &logs
}

// refusedParam asserts err is an InvalidArgument whose message names param.
func refusedParam(t *testing.T, err error, param string) {
	t.Helper()
	if connect.CodeOf(err) != connect.CodeInvalidArgument {
		t.Fatalf("error %v, want InvalidArgument", err)
	}
	if !strings.Contains(err.Error(), param) {
		t.Errorf("message %q does not name %s", err, param)
	}
}

func TestRegularWorkerRefusedByPDGateway(t *testing.T) {
	s, _ := newTestService(t, true)
	ctx := context.Background()
	_, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://10.0.0.5:30000", Role: "regular", Protocol: "sglang"}})
	refusedParam(t, err, "role")
	if !strings.Contains(err.Error(), "prefill or decode") {
		t.Errorf("message %q does not say what to do", err)
	}
	if _, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://10.0.0.5:30000", Role: "prefill", Protocol: "sglang"}}); err != nil {
		t.Errorf("prefill worker: %v", err)
	}
	regular, _ := newTestService(t, false)
	if _, err := regular.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://10.0.0.5:30000", Role: "regular", Protocol: "sglang"}}); err != nil {
		t.Errorf("regular worker on a regular gateway: %v", err)
	}
}

// Off is 0, the value GetAdmission reports; a negative bound is taken as 0 (as the serve flags take
// it), not refused, so that no spelling of off is a 400.
func TestNegativeLimitsAreOff(t *testing.T) {
	s, _ := newTestService(t, true)
	ctx := context.Background()
	limit, tokens, decode := int32(-1), int32(-5), int32(-1)
	resp, err := s.UpdateAdmission(ctx, &adminv1.UpdateAdmissionRequest{MaxInflightPerWorker: &limit,
		MaxInflightTokensPerWorker: &tokens, DecodeMaxInflightPerWorker: &decode})
	if err != nil {
		t.Fatalf("negative bounds: %v", err)
	}
	if got := s.d.Admission.Settings(); got.MaxInflightPerWorker != 0 || got.MaxInflightTokensPerWorker != 0 || got.DecodeMaxInflightPerWorker != 0 {
		t.Errorf("negative bounds stored as %+v, want 0 (off)", got)
	}
	if set := resp.GetStatus().GetSettings(); resp.GetStatus().GetEnabled() || set.GetMaxInflightPerWorker() != 0 || set.GetMaxInflightTokensPerWorker() != 0 {
		t.Errorf("status after negative bounds: %v", resp.GetStatus())
	}
}

func TestListWorkersHealthFilterAndOrder(t *testing.T) {
	s, logs := newTestService(t, true)
	ctx := context.Background()
	// Added in an order their URLs do not sort in: the list follows the ids, w2 before w10.
	var want []string
	for i := range 11 {
		url := "http://10.0.0." + string(rune('z'-i)) + ".example:30000"
		resp, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: url, Role: "decode", Protocol: "sglang"}})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, resp.GetWorker().GetId())
	}
	if n := strings.Count(logs.String(), `msg="worker added"`); n != 11 {
		t.Errorf("%d 'worker added' lines for 11 adds:\n%s", n, logs)
	}
	resp, err := s.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range resp.GetWorkers() {
		got = append(got, w.GetId())
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("list order %v, want %v", got, want)
	}
	_, err = s.ListWorkers(ctx, &adminv1.ListWorkersRequest{Health: "bogus"})
	refusedParam(t, err, "health")
	if !strings.Contains(err.Error(), "ready") {
		t.Errorf("message %q does not list the health states", err)
	}
	if resp, err := s.ListWorkers(ctx, &adminv1.ListWorkersRequest{Health: "ready"}); err != nil || len(resp.GetWorkers()) != 11 {
		t.Errorf("health=ready: %d workers, %v", len(resp.GetWorkers()), err)
	}
}

// TestWorkerKVEvents: a worker's KV events endpoint is given and shown by the admin API; a bad one is
// refused, naming the field.
func TestWorkerKVEvents(t *testing.T) {
	s, _ := newTestService(t, false)
	ctx := context.Background()
	const spec = "tcp://10.0.0.5:5557?replay=tcp://10.0.0.5:5558"
	resp, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://10.0.0.5:30000", Role: "regular", Protocol: "vllm", KvEvents: spec}})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetWorker().GetKvEvents(); got != spec {
		t.Errorf("kv_events = %q, want %q", got, spec)
	}
	for _, bad := range []string{"tcp://*:5557", "ipc:///tmp/x", "tcp://h:5557?dp=0", "tcp://h:5557?bogus=1"} {
		_, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://10.0.0.6:30000", Role: "regular", Protocol: "vllm", KvEvents: bad}})
		refusedParam(t, err, "kv_events")
	}
}

// TestUpdateAdmissionRefusals: admission's Settings.Validate is the one rule; the admin API only names
// the bad field as its request does, and a refused update changes nothing.
func TestUpdateAdmissionRefusals(t *testing.T) {
	s, _ := newTestService(t, true)
	ctx := context.Background()
	before := s.d.Admission.Settings()
	neg, zero := int32(-1), durationpb.New(0)
	two := &adminv1.PriorityBandList{Bands: []*adminv1.PriorityBand{{Name: "low", MinPriority: 0}, {Name: "high", MinPriority: 5}}}
	for _, tt := range []struct {
		name  string
		req   *adminv1.UpdateAdmissionRequest
		param string
		words string
	}{
		{"negative queue", &adminv1.UpdateAdmissionRequest{QueueSize: &neg}, "queue_size", "queue_size must be at least 0, got -1"},
		{"zero timeout with a queue", &adminv1.UpdateAdmissionRequest{QueueTimeout: zero}, "queue_timeout", "queue_timeout must be positive when requests may wait"},
		{"zero aging with bands", &adminv1.UpdateAdmissionRequest{PriorityBands: two, PriorityAging: zero}, "priority_aging", "priority_aging must be positive with several priority bands"},
		{"bad adaptive range", &adminv1.UpdateAdmissionRequest{AdaptiveLimit: &adminv1.AdaptiveLimit{Min: 0, Max: 4}}, "adaptive_limit", "turn adaptation off"},
	} {
		_, err := s.UpdateAdmission(ctx, tt.req)
		refusedParam(t, err, tt.param)
		if err != nil && !strings.Contains(err.Error(), tt.words) {
			t.Errorf("%s: message %q, want one containing %q", tt.name, err, tt.words)
		}
		if got := s.d.Admission.Settings(); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: settings changed by a refused update: %+v, was %+v", tt.name, got, before)
		}
	}
	// What the flags accept, the API accepts: no queue needs no timeout.
	qs := int32(0)
	if _, err := s.UpdateAdmission(ctx, &adminv1.UpdateAdmissionRequest{QueueSize: &qs, QueueTimeout: zero}); err != nil {
		t.Errorf("queue size 0 with timeout 0 (never wait): %v", err)
	}
}
