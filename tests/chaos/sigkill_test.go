package chaos

import (
	"bytes"
	"fmt"
	"net/http"

	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/sim"
	"github.com/sluicegw/sluice/tests/testenv"
)

// TestMigrationSIGKILL is the migration soak against real engine processes: sluice-sim built from
// ./cmd/sluice-sim, one process per engine, each decode process SIGKILLed in turn in the middle of
// the clients' streams and started again on its port, as a supervisor (kubelet, systemd) restarts a
// crashed engine. The kernel closes the dead process's sockets; nothing in the engine ends an answer.
// The invariants are the soak's: no failed request, no truncated or corrupted stream, migrations
// happened, the gateway idle afterwards. Modes: the migration soak's four (SGLang and vLLM over their
// gRPC, SGLang /generate and vLLM completions over HTTP).
func TestMigrationSIGKILL(t *testing.T) {
	bin := buildSim(t)
	per := max(8*time.Second, soakDuration(t)/12)
	for _, m := range []soakMode{{"grpc-sglang", sim.ProtocolSGLang, false}, {"grpc-vllm", sim.ProtocolVLLM, false},
		{"http-sglang-generate", sim.ProtocolSGLang, true}, {"http-vllm", sim.ProtocolVLLM, true}} {
		t.Run(m.name, func(t *testing.T) {
			f := startProcessFleet(t, bin, m, 2, 2)
			soakUnderKills(t, m, f, per, soakLogger())
		})
	}
}

// buildSim builds sluice-sim into the test's temporary directory.
func buildSim(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "sluice-sim")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/sluice-sim")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/sluice-sim: %v\n%s", err, out)
	}
	return bin
}

// engineProcess is one sluice-sim process and the arguments it is restarted with.
type engineProcess struct {
	bin  string
	args []string
	url  string // http://127.0.0.1:port

	mu  sync.Mutex
	cmd *exec.Cmd
	out bytes.Buffer // its output, every run's, reported when the test fails
}

// startProcessFleet starts prefills + decodes engine processes of m and stops them when the test ends.
func startProcessFleet(t *testing.T, bin string, m soakMode, prefills, decodes int) *soakFleet {
	t.Helper()
	ports := testenv.FreePorts(t, 2*prefills+decodes)
	var procs []*engineProcess
	f := &soakFleet{}
	start := func(role sim.Role, port, bootstrap int) *engineProcess {
		args := []string{"--role", string(role), "--protocol", string(m.protocol), "--host", "127.0.0.1",
			"--port", strconv.Itoa(port), "--seed", "7", "--itl-base-ms", "3"}
		if !m.http {
			args = append(args, "--grpc", "--grpc-engine-only")
		}
		if m.byteIDs() {
			args = append(args, "--grpc-byte-token-ids")
		}
		if bootstrap > 0 {
			args = append(args, "--bootstrap-port", strconv.Itoa(bootstrap))
		}
		p := &engineProcess{bin: bin, args: args, url: "http://127.0.0.1:" + strconv.Itoa(port)}
		procs = append(procs, p)
		p.start(t)
		return p
	}
	t.Cleanup(func() {
		for _, p := range procs {
			p.stop()
		}
		if t.Failed() {
			for _, p := range procs {
				t.Logf("%s %v:\n%s", p.bin, p.args, p.output())
			}
		}
	})
	url := func(p *engineProcess) string {
		if m.http {
			return p.url
		}
		return "grpc://" + p.url[len("http://"):]
	}
	for i := range prefills {
		bootstrap := 0
		if m.protocol == sim.ProtocolSGLang {
			bootstrap = ports[prefills+decodes+i]
		}
		p := start(sim.RolePrefill, ports[i], bootstrap)
		f.prefills = append(f.prefills, enginePort{url(p), bootstrap})
	}
	var ds []*engineProcess
	for i := range decodes {
		p := start(sim.RoleDecode, ports[prefills+i], 0)
		ds = append(ds, p)
		f.decodes = append(f.decodes, url(p))
	}
	for _, p := range procs {
		p.waitHealthy(t)
	}
	f.kill = func(i int) {
		ds[i].sigkill(t)
		ds[i].start(t)
	}
	return f
}

func (p *engineProcess) start(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = &lockedWriter{p: p}, &lockedWriter{p: p}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", p.bin, err)
	}
	p.cmd = cmd
}

// sigkill kills the process with SIGKILL and reaps it.
func (p *engineProcess) sigkill(t *testing.T) {
	t.Helper()
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatalf("SIGKILL: %v", err)
	}
	_ = cmd.Wait() // "signal: killed"
}

// stop ends the process at the end of the test (SIGKILL: nothing of it is checked any more).
func (p *engineProcess) stop() {
	p.mu.Lock()
	cmd := p.cmd
	p.mu.Unlock()
	if cmd != nil && cmd.ProcessState == nil {
		_ = cmd.Process.Signal(syscall.SIGKILL)
		_ = cmd.Wait()
	}
}

// waitHealthy polls the engine's /health until it answers 200.
func (p *engineProcess) waitHealthy(t *testing.T) {
	t.Helper()
	c := &http.Client{Timeout: time.Second}
	waitUntil(t, fmt.Sprintf("%s is healthy", p.url), func() bool {
		resp, err := c.Get(p.url + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	c.CloseIdleConnections()
}

func (p *engineProcess) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// lockedWriter appends a process's output to its buffer under the process's lock (stdout and stderr
// are copied by two goroutines).
type lockedWriter struct{ p *engineProcess }

func (w *lockedWriter) Write(b []byte) (int, error) {
	w.p.mu.Lock()
	defer w.p.mu.Unlock()
	return w.p.out.Write(b)
}
