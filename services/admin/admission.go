package admin

import (
	"context"
	"maps"
	"math"
	"slices"
	"strings"

	"google.golang.org/protobuf/types/known/durationpb"

	adminv1 "github.com/sluicegw/sluice/gen/sluice/admin/v1"
	"github.com/sluicegw/sluice/internal/admission"
	"github.com/sluicegw/sluice/internal/cluster"
	"github.com/sluicegw/sluice/internal/fielderr"
	"github.com/sluicegw/sluice/internal/worker"
)

func (s *Service) status() *adminv1.AdmissionStatus {
	st := s.d.Admission.Status()
	out := &adminv1.AdmissionStatus{
		Enabled: st.Settings.Enabled(),
		// Off is reported as 0 whatever negative value set it (the serve flags took -1 once, "auto"
		// stores -1 as the decode bound), so that these settings PATCHed back change nothing.
		Settings: &adminv1.AdmissionSettings{
			MaxInflightPerWorker:       int32(max(st.Settings.MaxInflightPerWorker, 0)),
			QueueSize:                  int32(st.Settings.QueueSize),
			QueueTimeout:               durationpb.New(st.Settings.QueueTimeout),
			MaxInflightTokensPerWorker: clamp32(max(st.Settings.MaxInflightTokensPerWorker, 0)),
			EarlyRejection:             st.Settings.EarlyRejection,
			DecodeMaxInflightPerWorker: int32(max(st.Settings.DecodeMaxInflightPerWorker, 0)),
			DecodeAuto:                 st.Settings.DecodeAuto,
		},
		Queued:          int32(st.QueuedTotal),
		WaitP50Seconds:  st.Wait.P50.Seconds(),
		WaitP90Seconds:  st.Wait.P90.Seconds(),
		WaitP99Seconds:  st.Wait.P99.Seconds(),
		Rejections:      map[string]int32{},
		ReleaseRate:     st.ReleaseRate,
		SeatReleaseRate: st.SeatReleaseRate,
	}
	seats := st.Seats
	if st.Settings.DecodeAuto {
		seats = s.withUnboundedDecode(st)
	}
	for _, k := range slices.Sorted(maps.Keys(seats)) {
		out.DecodeWorkers = append(out.DecodeWorkers, &adminv1.DecodeSeats{Worker: k, Inflight: int32(st.Seats[k]),
			Limit: int32(st.SeatLimits[k]), Window: int32(st.DecodeCapacity[k].Window)})
	}
	set := out.Settings
	if st.Settings.Aging > 0 {
		set.PriorityAging = durationpb.New(st.Settings.Aging)
	}
	if a := st.Settings.Adaptive; a.On() {
		set.AdaptiveLimit = &adminv1.AdaptiveLimit{Min: int32(a.Min), Max: int32(a.Max)}
	}
	for _, b := range st.Settings.Bands {
		set.PriorityBands = append(set.PriorityBands, &adminv1.PriorityBand{Name: b.Name, MinPriority: int32(b.MinPriority)})
		if len(st.Settings.Bands) > 1 {
			out.Bands = append(out.Bands, &adminv1.BandState{Name: b.Name, MinPriority: int32(b.MinPriority), Queued: int32(st.QueuedByBand[b.Name])})
		}
	}
	for _, m := range slices.Sorted(maps.Keys(st.Queued)) {
		out.Queues = append(out.Queues, &adminv1.QueueState{Model: m, Queued: int32(st.Queued[m])})
	}
	var cs *cluster.Status
	if s.d.Cluster != nil {
		cs = s.d.Cluster()
	}
	urls := maps.Clone(st.Inflight)
	if cs != nil {
		for u := range cs.Workers {
			urls[u] += 0
		}
	}
	for _, u := range slices.Sorted(maps.Keys(urls)) {
		wa := &adminv1.WorkerAdmission{Url: u, Inflight: int32(st.Inflight[u]),
			InflightTokens: clamp32(st.InflightTokens[u]), Limit: int32(st.Limits[u]), ClusterShare: -1}
		if cs != nil {
			wa.ClusterShare = int32(cs.Other)
			if ws, ok := cs.Workers[u]; ok {
				wa.ClusterShare, wa.ClusterDemand = int32(ws.Share), int32(ws.Demand)
			}
		}
		out.Workers = append(out.Workers, wa)
	}
	for k, v := range st.Rejections {
		out.Rejections[k] = clamp32(int64(min(v, math.MaxInt32)))
	}
	if cs != nil {
		out.Cluster = clusterToProto(cs)
	}
	return out
}

// clusterToProto renders cluster admission's status.
func clusterToProto(cs *cluster.Status) *adminv1.ClusterAdmission {
	out := &adminv1.ClusterAdmission{
		Mode: cs.Mode, Replica: cs.Replica, Coordinator: cs.Coordinator, IsCoordinator: cs.IsCoordinator, Term: cs.Term,
		Fallback: cs.Fallback, FleetLimit: int32(cs.FleetLimit), Members: cs.Members, RaisesBlocked: cs.RaisesBlocked,
		Rebalances: clamp32(cs.Rebalances),
	}
	if cs.LeaseAge >= 0 {
		out.LeaseAge = durationpb.New(cs.LeaseAge)
	}
	for _, m := range cs.Replicas {
		cm := &adminv1.ClusterMember{Replica: m.Replica, State: m.State}
		if m.SinceContact >= 0 {
			cm.SinceContact = durationpb.New(m.SinceContact)
		}
		for _, w := range slices.Sorted(maps.Keys(m.Workers)) {
			mw := m.Workers[w]
			cm.Workers = append(cm.Workers, &adminv1.ClusterWorkerShare{Worker: w, Granted: int32(mw.Granted),
				Reserved: int32(mw.Reserved), Demand: int32(mw.Demand), Inflight: int32(mw.Inflight)})
		}
		out.Replicas = append(out.Replicas, cm)
	}
	return out
}

// GetAdmission returns settings and live state.
func (s *Service) GetAdmission(context.Context, *adminv1.GetAdmissionRequest) (*adminv1.GetAdmissionResponse, error) {
	return &adminv1.GetAdmissionResponse{Status: s.status()}, nil
}

// UpdateAdmission applies new settings at once; unset fields keep their value. A new request limit
// without an adaptive range sets a fixed limit: it turns adaptation off. The bounds that can be off
// (request limit, token bound, decode bound) are off at 0, the value GetAdmission reports for off; a
// negative value is taken as 0, as the serve flags take it, so no spelling of off is refused.
func (s *Service) UpdateAdmission(_ context.Context, req *adminv1.UpdateAdmissionRequest) (*adminv1.UpdateAdmissionResponse, error) {
	set := s.d.Admission.Settings()
	if req.MaxInflightPerWorker != nil {
		set.MaxInflightPerWorker = int(max(req.GetMaxInflightPerWorker(), 0))
		if req.AdaptiveLimit == nil {
			set.Adaptive = admission.AdaptiveLimit{}
		}
	}
	if req.QueueSize != nil {
		set.QueueSize = int(req.GetQueueSize())
	}
	if req.QueueTimeout != nil {
		if err := req.GetQueueTimeout().CheckValid(); err != nil {
			return nil, invalid("queue_timeout", "%v", err)
		}
		set.QueueTimeout = req.GetQueueTimeout().AsDuration()
	}
	if req.MaxInflightTokensPerWorker != nil {
		set.MaxInflightTokensPerWorker = int64(max(req.GetMaxInflightTokensPerWorker(), 0))
	}
	if req.PriorityAging != nil {
		if err := req.GetPriorityAging().CheckValid(); err != nil {
			return nil, invalid("priority_aging", "%v", err)
		}
		set.Aging = req.GetPriorityAging().AsDuration()
	}
	if req.PriorityBands != nil {
		set.Bands = nil
		for _, b := range req.GetPriorityBands().GetBands() {
			set.Bands = append(set.Bands, admission.Band{Name: b.GetName(), MinPriority: int(b.GetMinPriority())})
		}
		if len(set.Bands) > 1 && set.Aging == 0 && req.PriorityAging == nil {
			set.Aging = admission.DefaultAging
		}
	}
	if req.EarlyRejection != nil {
		set.EarlyRejection = req.GetEarlyRejection()
	}
	if req.DecodeMaxInflightPerWorker != nil {
		set.DecodeMaxInflightPerWorker = int(max(req.GetDecodeMaxInflightPerWorker(), 0))
	}
	if req.DecodeAuto != nil {
		set.DecodeAuto = req.GetDecodeAuto()
	}
	if req.AdaptiveLimit != nil {
		set.Adaptive = admission.AdaptiveLimit{Min: int(req.GetAdaptiveLimit().GetMin()), Max: int(req.GetAdaptiveLimit().GetMax())}
	}
	if err := s.d.Admission.Update(set); err != nil {
		return nil, invalidSettings(err)
	}
	if s.d.OnAdmissionUpdate != nil {
		s.d.OnAdmissionUpdate(set)
	}
	s.d.Logger.Info("admission settings updated", "limit", set.MaxInflightPerWorker, "queue_size", set.QueueSize, "queue_timeout", set.QueueTimeout,
		"token_limit", set.MaxInflightTokensPerWorker, "bands", len(set.Bands), "aging", set.Aging, "early_rejection", set.EarlyRejection,
		"adaptive_min", set.Adaptive.Min, "adaptive_max", set.Adaptive.Max,
		"decode_limit", set.DecodeMaxInflightPerWorker, "decode_auto", set.DecodeAuto)
	return &adminv1.UpdateAdmissionResponse{Status: s.status()}, nil
}

// admissionFields name admission.Settings' fields as UpdateAdmissionRequest's fields.
var admissionFields = map[string]string{
	"QueueSize": "queue_size", "QueueTimeout": "queue_timeout", "Bands": "priority_bands",
	"Aging": "priority_aging", "Adaptive": "adaptive_limit",
}

// invalidSettings is admission's own refusal of the new settings (Settings.Validate: its rules and
// words, checked once), as InvalidArgument naming each bad field as the request names it.
func invalidSettings(err error) error {
	fields, other := fielderr.All(err)
	param := "max_inflight_per_worker" // a refusal that names no field is of the settings as a whole
	var msgs []string
	for i, f := range fields {
		name := admissionFields[f.Field]
		if name == "" {
			msgs = append(msgs, f.Error())
			continue
		}
		if i == 0 {
			param = name
		}
		m := f.Named(name)
		if f.Field == "Adaptive" {
			m += " (min 0 and max 0 turn adaptation off)"
		}
		msgs = append(msgs, m)
	}
	for _, e := range other {
		msgs = append(msgs, e.Error())
	}
	return invalid(param, "%s", strings.Join(msgs, "; "))
}

// withUnboundedDecode adds to the seat table, under decode seats auto, every registered decode worker
// (and rank) whose window is unknown: admission bounds it by nothing, and leaving it out of the table
// (as admission's status does until it holds a seat) hid that from the operator. Its row shows limit
// and window 0, which the CLI prints as none (unbounded) and unknown.
func (s *Service) withUnboundedDecode(st admission.Status) map[string]int {
	if s.d.Registry == nil {
		return st.Seats
	}
	out := maps.Clone(st.Seats)
	if out == nil {
		out = map[string]int{}
	}
	for _, w := range s.d.Registry.Snapshot().ByRole(worker.RoleDecode) {
		keys := []string{w.Key()}
		for _, r := range w.Ranks() {
			keys = append(keys, r.Key())
		}
		for _, k := range keys {
			if _, ok := out[k]; !ok {
				out[k] = 0
			}
		}
	}
	return out
}
