package cluster

import (
	"context"
	"errors"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	clusterv1 "github.com/sluicegw/sluice/gen/sluice/cluster/v1"
	"github.com/sluicegw/sluice/gen/sluice/cluster/v1/clusterv1connect"
	"github.com/sluicegw/sluice/internal/testkit/poll"
)

func TestParsePeers(t *testing.T) {
	got, err := ParsePeers([]string{" HTTP://Gw-1.example:30000/ ", "http://10.0.0.2:9090", "", "https://[::1]:443"})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://gw-1.example:30000", "http://10.0.0.2:9090", "https://[::1]:443"}; !slices.Equal(got, want) {
		t.Errorf("peers %v, want %v", got, want)
	}
	for _, tc := range []struct{ in, want string }{
		{"10.0.0.1:30000", "want a base URL"},
		{"http://10.0.0.1", "scheme://host:port only"},
		{"http://10.0.0.1:0", "port out of range"},
		{"http://u:p@10.0.0.1:1", "scheme://host:port only"},
		{"http://a:1,http://A:1", "given twice"},
	} {
		_, err := ParsePeers(strings.Split(tc.in, ","))
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParsePeers(%q) = %v, want %q", tc.in, err, tc.want)
		}
	}
	if _, err := ParsePeers(nil); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("empty peers: %v", err)
	}
}

type fakeResolver map[string][]netip.Addr

func (r fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := r[host]; ok {
		return a, nil
	}
	return nil, errors.New("no such host")
}

func TestFindSelf(t *testing.T) {
	local := []netip.Addr{netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")}
	res := fakeResolver{"gw-2": {netip.MustParseAddr("10.0.0.2")}, "gw-3": {netip.MustParseAddr("10.0.0.3")}}
	peers := []string{"http://10.0.0.1:30000", "http://gw-2:30000", "http://gw-3:30000", "http://127.0.0.1:30001"}
	for _, tc := range []struct {
		name, host string
		port       int
		want       string
		wantErr    string
	}{
		{"by a resolved name on a local address", "0.0.0.0", 30000, "http://gw-2:30000", ""},
		{"loopback with a distinct port", "0.0.0.0", 30001, "http://127.0.0.1:30001", ""},
		{"a specific listen host only matches itself", "10.0.0.1", 30000, "http://10.0.0.1:30000", ""},
		{"no peer on this port", "0.0.0.0", 40000, "", "no peer names this replica"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := FindSelf(context.Background(), peers, tc.host, tc.port, local, res)
			if tc.wantErr != "" {
				if !errors.Is(err, ErrSelfNotFound) || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("FindSelf = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	_, err := FindSelf(context.Background(), []string{"http://10.0.0.2:1", "http://gw-2:1"}, "0.0.0.0", 1, local, res)
	if !errors.Is(err, ErrSelfNotFound) || !strings.Contains(err.Error(), "several peers") {
		t.Errorf("two peers naming this replica: %v", err)
	}
}

// TestServiceErrors: the coordination service over a real socket answers malformed, foreign and misrouted
// calls with the right codes, and a replica that is not started yet with Unavailable.
func TestServiceErrors(t *testing.T) {
	self := "http://a-self:1"
	r, err := New(Config{Mode: ModeStatic, Peers: []string{self, "http://b-other:1"}, Period: time.Hour, Lease: 2 * time.Hour}, Deps{Local: newFakeLocal(4)})
	if err != nil {
		t.Fatal(err)
	}
	_, h := r.Handler()
	srv := httptest.NewServer(h)
	defer srv.Close()
	c := clusterv1connect.NewAdmissionCoordinationServiceClient(srv.Client(), srv.URL)
	ctx := context.Background()
	code := func(err error) connect.Code { return connect.CodeOf(err) }

	if _, err := c.Ping(ctx, &clusterv1.PingRequest{ProtocolVersion: ProtocolVersion, Replica: "http://b-other:1"}); code(err) != connect.CodeUnavailable {
		t.Errorf("before Run: %v, want unavailable", err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- r.Run(runCtx, self) }()
	defer func() { cancel(); <-done }()
	poll.Until(t, "Run to start", 5*time.Second, r.started.Load)

	for _, tc := range []struct {
		name string
		req  *clusterv1.ExchangeRequest
		want connect.Code
	}{
		{"other protocol version", &clusterv1.ExchangeRequest{ProtocolVersion: 2, Replica: "http://b-other:1"}, connect.CodeFailedPrecondition},
		{"no replica", &clusterv1.ExchangeRequest{ProtocolVersion: ProtocolVersion}, connect.CodeInvalidArgument},
		{"negative count", &clusterv1.ExchangeRequest{ProtocolVersion: ProtocolVersion, Replica: "http://b-other:1",
			Workers: []*clusterv1.WorkerUsage{{Worker: "w", Inflight: -1}}}, connect.CodeInvalidArgument},
		{"worker twice", &clusterv1.ExchangeRequest{ProtocolVersion: ProtocolVersion, Replica: "http://b-other:1",
			Workers: []*clusterv1.WorkerUsage{{Worker: "w"}, {Worker: "w"}}}, connect.CodeInvalidArgument},
		{"a stranger", &clusterv1.ExchangeRequest{ProtocolVersion: ProtocolVersion, Replica: "http://stranger:1"}, connect.CodeFailedPrecondition},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := c.Exchange(ctx, tc.req); code(err) != tc.want {
				t.Errorf("err = %v, want %v", err, tc.want)
			}
		})
	}
	// self is the lowest member: it coordinates, and grants the other.
	resp, err := c.Exchange(ctx, &clusterv1.ExchangeRequest{ProtocolVersion: ProtocolVersion, Replica: "http://b-other:1", Incarnation: "x", Limit: 4,
		Workers: []*clusterv1.WorkerUsage{{Worker: "w", Demand: 3}}})
	if err != nil || resp.GetCoordinator() != self || resp.GetTerm() == "" || resp.GetLease().AsDuration() != 2*time.Hour {
		t.Fatalf("exchange: %v, %v", resp, err)
	}
	ping, err := c.Ping(ctx, &clusterv1.PingRequest{ProtocolVersion: ProtocolVersion, Replica: "http://b-other:1"})
	if err != nil || ping.GetReplica() != self || ping.GetCoordinator() != self {
		t.Fatalf("ping: %v, %v", ping, err)
	}
}
