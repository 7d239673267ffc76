package admin

import (
	"context"
	"testing"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/worker"
)

// FuzzAdminInput fuzzes the admin API's input validation (AddWorker, UpdateWorker, UpdateAdmission) on a
// real registry and admission controller: no panic, every refusal is an InvalidArgument, NotFound or
// AlreadyExists error (never Internal), and the admission settings stay valid whatever is sent.
func FuzzAdminInput(f *testing.F) {
	f.Add("http://10.0.0.5:30000", "prefill", "sglang", uint32(8998), "m", "zone", "a", int32(4), int32(100), int64(30), int32(0))
	f.Add("grpc://127.0.0.1:1", "decode", "grpc", uint32(0), "", "", "", int32(-1), int32(-5), int64(-1), int32(-1))
	f.Add("http://u:p@h:1", "bogus", "x", uint32(70000), " ", "k", "", int32(0), int32(0), int64(0), int32(999999999))
	f.Add("", "", "", uint32(0), "", "", "", int32(1<<30), int32(1<<30), int64(315576000000), int32(999999999))
	f.Fuzz(func(t *testing.T, url, role, protocol string, port uint32, model, lk, lv string, limit, queue int32, secs int64, nanos int32) {
		reg := worker.NewRegistry(worker.RegistryOptions{StartReady: true})
		adm, err := admission.New(admission.Settings{MaxInflightPerWorker: 2, QueueSize: 10, QueueTimeout: time.Second}, admission.Deps{})
		if err != nil {
			t.Fatal(err)
		}
		s := New(Deps{Registry: reg, Admission: adm})
		defer s.Close()
		ctx := context.Background()
		allowed := func(err error) {
			t.Helper()
			switch connect.CodeOf(err) {
			case connect.CodeInvalidArgument, connect.CodeNotFound, connect.CodeAlreadyExists:
			default:
				t.Fatalf("refusal with code %v: %v", connect.CodeOf(err), err)
			}
		}
		spec := &adminv1.WorkerSpec{Url: url, Role: role, Protocol: protocol, BootstrapPort: port,
			Models: []string{model}, Labels: map[string]string{lk: lv}}
		added, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: spec})
		if err != nil {
			allowed(err)
		} else {
			p := port
			if _, err := s.UpdateWorker(ctx, &adminv1.UpdateWorkerRequest{Id: added.GetWorker().GetId(), BootstrapPort: &p,
				Labels: map[string]string{lk: lv}}); err != nil {
				allowed(err)
			}
		}
		req := &adminv1.UpdateAdmissionRequest{MaxInflightPerWorker: &limit, QueueSize: &queue,
			QueueTimeout: &durationpb.Duration{Seconds: secs, Nanos: nanos}}
		if _, err := s.UpdateAdmission(ctx, req); err != nil {
			allowed(err)
		}
		if err := adm.Settings().Validate(); err != nil {
			t.Fatalf("admission settings invalid after UpdateAdmission: %+v: %v", adm.Settings(), err)
		}
	})
}
