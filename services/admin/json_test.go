package admin

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoreflect"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
)

// Every integer of the admin API is 32-bit, so that it is a JSON number: protojson writes 64-bit
// integers as strings, and the admin JSON would mix "load":"3" with "queue_size":100.
func TestAdminIntegersAreJSONNumbers(t *testing.T) {
	var walk func(protoreflect.MessageDescriptors)
	walk = func(ms protoreflect.MessageDescriptors) {
		for i := range ms.Len() {
			m := ms.Get(i)
			for j := range m.Fields().Len() {
				f := m.Fields().Get(j)
				if f.IsMap() {
					f = f.MapValue()
				}
				switch f.Kind() {
				case protoreflect.Int64Kind, protoreflect.Uint64Kind, protoreflect.Sint64Kind, protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind:
					t.Errorf("%s is %s: it renders as a JSON string", m.Fields().Get(j).FullName(), f.Kind())
				}
			}
			walk(m.Messages())
		}
	}
	walk(adminv1.File_sluice_admin_v1_admin_proto.Messages())

	// And as the REST surface renders it: load, slots and rejections are numbers.
	s, _ := newTestService(t, true)
	ctx := context.Background()
	if _, err := s.AddWorker(ctx, &adminv1.AddWorkerRequest{Worker: &adminv1.WorkerSpec{Url: "http://10.0.0.5:30000", Role: "prefill", Protocol: "sglang"}}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ListWorkers(ctx, &adminv1.ListWorkersRequest{})
	if err != nil {
		t.Fatal(err)
	}
	adm, err := s.GetAdmission(ctx, &adminv1.GetAdmissionRequest{})
	if err != nil {
		t.Fatal(err)
	}
	opts := protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	for _, m := range []interface{ ProtoReflect() protoreflect.Message }{list, adm} {
		b, err := opts.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var v map[string]any
		if err := json.Unmarshal(b, &v); err != nil {
			t.Fatal(err)
		}
		for _, key := range []string{`"load":`, `"admission_inflight":`, `"max_inflight_tokens_per_worker":`} {
			if i := strings.Index(string(b), key); i >= 0 && b[i+len(key)] == '"' {
				t.Errorf("%s is a string in %s", key, b)
			}
		}
	}
}
