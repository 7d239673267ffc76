package bench

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
)

// gateway is a sluice gateway started by a scenario, in-process or as a child process.
type gateway struct {
	url  string
	app  *app.App // in-process
	proc *child   // separate process
}

// startGatewayInProcess builds and starts a gateway from command-line flags (host and port are set
// here: 127.0.0.1, a free port).
func startGatewayInProcess(ctx context.Context, flags []string, logger *slog.Logger) (*gateway, error) {
	args := append([]string{"--host", "127.0.0.1", "--port", "0", "--log-level", "error"}, flags...)
	cfg, err := config.Parse(args, io.Discard)
	if err != nil {
		return nil, fmt.Errorf("gateway config: %w", err)
	}
	a, err := app.New(ctx, cfg, app.Options{Logger: logger})
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	if err := a.Start(ctx); err != nil {
		return nil, fmt.Errorf("gateway start: %w", err)
	}
	g := &gateway{url: "http://" + a.Addr(), app: a}
	if err := waitReady(ctx, g.url+"/readiness", 20*time.Second); err != nil {
		_ = g.close()
		return nil, err
	}
	return g, nil
}

// startGatewayProcess runs `bin serve` with flags on a free port.
func startGatewayProcess(ctx context.Context, bin string, flags []string, logf io.Writer) (*gateway, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--host", "127.0.0.1", "--port", strconv.Itoa(port), "--log-level", "error"}, flags...)
	c, err := startChild(bin, args, logf)
	if err != nil {
		return nil, err
	}
	g := &gateway{url: "http://127.0.0.1:" + strconv.Itoa(port), proc: c}
	if err := waitReady(ctx, g.url+"/readiness", 20*time.Second); err != nil {
		_ = g.close()
		return nil, fmt.Errorf("gateway process: %w", err)
	}
	return g, nil
}

func (g *gateway) close() error {
	if g.app != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		return g.app.Shutdown(ctx)
	}
	if g.proc != nil {
		return g.proc.stop()
	}
	return nil
}

// waitReady polls url until it answers 2xx or the timeout passes.
func waitReady(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	tr := NewTransport(1)
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 2 * time.Second}
	var last error
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := hc.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode/100 == 2 {
				return nil
			}
			last = fmt.Errorf("%s: %s", url, resp.Status)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready: %w", last)
		case <-tick.C:
		}
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// child is a process a scenario started; stop ends it (SIGTERM, then SIGKILL) and reaps it.
type child struct {
	cmd    *exec.Cmd
	done   chan struct{}
	err    error
	stdout *bufio.Reader
}

func startChild(bin string, args []string, stderr io.Writer) (*child, error) {
	return startChildEnv(bin, args, nil, stderr)
}

// startChildEnv is startChild with env added to this process's environment.
func startChildEnv(bin string, args, env []string, stderr io.Writer) (*child, error) {
	cmd := exec.Command(bin, args...)
	if len(env) > 0 {
		cmd.Env = append(os.Environ(), env...)
	}
	if stderr == nil {
		stderr = io.Discard
	}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", filepath.Base(bin), err)
	}
	c := &child{cmd: cmd, done: make(chan struct{}), stdout: bufio.NewReader(out)}
	go func() {
		// Wait closes the stdout pipe, so it must not run before the reader is done with the
		// lines it needs; readers only read before stop, and stop waits on done.
		c.err = cmd.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *child) pid() int { return c.cmd.Process.Pid }

func (c *child) stop() error {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
	var ee *exec.ExitError
	if c.err != nil && !errors.As(c.err, &ee) {
		return c.err
	}
	return nil
}

// clockTicks is USER_HZ, the unit of utime/stime in /proc/<pid>/stat: 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// procCPU returns the user+system CPU seconds a process has used.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name may contain spaces: fields are counted after its closing parenthesis.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: malformed", pid)
	}
	f := strings.Fields(string(b[i+1:]))
	// After ")": state(3) ppid(4) ... utime(14) stime(15): indexes 11 and 12 here.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: short", pid)
	}
	u, err1 := strconv.ParseUint(f[11], 10, 64)
	s, err2 := strconv.ParseUint(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return float64(u+s) / clockTicks, nil
}

// childrenOf lists the pids whose parent is pid (nginx workers of a master).
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

// cpuOf sums procCPU over pids, ignoring processes that are gone.
func cpuOf(pids []int) float64 {
	total := 0.0
	for _, p := range pids {
		if v, err := procCPU(p); err == nil {
			total += v
		}
	}
	return total
}

// nginx is an nginx reverse proxy run in the foreground by a scenario.
type nginx struct {
	url  string
	proc *child
	dir  string
}

// findNginx locates nginx; with install set and running as root it installs it with apt-get.
func findNginx(install bool, log io.Writer) (string, error) {
	for _, p := range []string{"nginx", "/usr/sbin/nginx", "/usr/local/sbin/nginx"} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	if !install {
		return "", errors.New("nginx not found (pass --install-nginx as root to install it)")
	}
	if os.Geteuid() != 0 {
		return "", errors.New("nginx not found and not root: cannot install it")
	}
	cmd := exec.Command("apt-get", "install", "-y", "nginx-light")
	cmd.Stdout, cmd.Stderr = log, log
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("apt-get install nginx-light: %w", err)
	}
	return exec.LookPath("/usr/sbin/nginx")
}

const nginxConf = `{{user}}worker_processes {{workers}};
daemon off;
master_process on;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log warn;
worker_rlimit_nofile 40000;
events { worker_connections 16384; multi_accept on; }
http {
  access_log off;
  client_body_temp_path {{dir}}/body;
  proxy_temp_path {{dir}}/proxy;
  fastcgi_temp_path {{dir}}/fastcgi;
  uwsgi_temp_path {{dir}}/uwsgi;
  scgi_temp_path {{dir}}/scgi;
  keepalive_requests 1000000;
  upstream backend {
    server {{upstream}};
    keepalive 512;
    keepalive_requests 1000000;
  }
  server {
    listen 127.0.0.1:{{port}} reuseport backlog=65535;
    location / {
      proxy_pass http://backend;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 600s;
    }
  }
}
`

// startNginx proxies 127.0.0.1:<free port> to upstream (host:port) with upstream keep-alive.
func startNginx(ctx context.Context, bin, upstream string, workers int, stderr io.Writer) (*nginx, error) {
	dir, err := os.MkdirTemp("", "sluice-bench-nginx-")
	if err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	user := ""
	if os.Geteuid() == 0 {
		user = "user root;\n" // workers write temp files into dir, which root created
	}
	conf := strings.NewReplacer("{{user}}", user, "{{workers}}", strconv.Itoa(workers), "{{dir}}", dir,
		"{{upstream}}", upstream, "{{port}}", strconv.Itoa(port)).Replace(nginxConf)
	path := filepath.Join(dir, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, err
	}
	c, err := startChild(bin, []string{"-p", dir, "-c", path, "-e", filepath.Join(dir, "error.log")}, stderr)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n := &nginx{url: "http://127.0.0.1:" + strconv.Itoa(port), proc: c, dir: dir}
	if err := waitReady(ctx, n.url+"/health", 10*time.Second); err != nil {
		_ = n.close()
		b, _ := os.ReadFile(filepath.Join(dir, "error.log"))
		return nil, fmt.Errorf("nginx: %w: %s", err, b)
	}
	return n, nil
}

// pids returns the master's and the workers' pids.
func (n *nginx) pids() []int { return append([]int{n.proc.pid()}, childrenOf(n.proc.pid())...) }

func (n *nginx) close() error {
	err := n.proc.stop()
	os.RemoveAll(n.dir)
	return err
}

// simProcess is a `sluice-sim cluster` child process and the engines it printed.
type simProcess struct {
	proc    *child
	engines []simEngine
}

type simEngine struct {
	role, url     string
	bootstrapPort int
}

func startSimProcess(bin string, args []string, count int, stderr io.Writer) (*simProcess, error) {
	c, err := startChild(bin, append([]string{"cluster"}, args...), stderr)
	if err != nil {
		return nil, err
	}
	s := &simProcess{proc: c}
	lines := make(chan error, 1)
	go func() {
		for len(s.engines) < count {
			line, err := c.stdout.ReadString('\n')
			if err != nil {
				lines <- fmt.Errorf("sluice-sim output: %w", err)
				return
			}
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			e := simEngine{role: f[0], url: f[1]}
			if len(f) > 2 {
				e.bootstrapPort, _ = strconv.Atoi(f[2])
			}
			s.engines = append(s.engines, e)
		}
		lines <- nil
	}()
	select {
	case err = <-lines:
	case <-time.After(20 * time.Second):
		err = errors.New("sluice-sim did not list its engines within 20s")
	}
	if err != nil {
		_ = c.stop()
		_ = <-lines //nolint:staticcheck // the reader goroutine has finished; its error is already err
		return nil, err
	}
	// Drain further output so the child never blocks on a full pipe.
	go func() { _, _ = io.Copy(io.Discard, c.stdout) }()
	return s, nil
}

func (s *simProcess) byRole(role string) []simEngine {
	var out []simEngine
	for _, e := range s.engines {
		if e.role == role {
			out = append(out, e)
		}
	}
	return out
}

// moduleRoot finds the sluice module root from the working directory upwards.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && bytes.Contains(b, []byte("module github.com/sluicegw/sluice\n")) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("sluice module root not found above the working directory (use --sluice-bin and --sim-bin)")
		}
		dir = parent
	}
}

var buildMu sync.Mutex

// buildBinary builds ./cmd/<name> of the module into dir.
func buildBinary(ctx context.Context, root, name, dir string, log io.Writer) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	out := filepath.Join(dir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "./cmd/"+name)
	cmd.Dir = root
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go build ./cmd/%s: %w", name, err)
	}
	return out, nil
}

// scrapeGauge reads the value of an unlabelled metric from a Prometheus text endpoint.
func scrapeGauge(ctx context.Context, hc *http.Client, url, name string) (float64, error) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name); ok && (strings.HasPrefix(rest, " ") || strings.HasPrefix(rest, "{")) {
			f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
			if len(f) == 0 {
				continue
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// gaugeSum sums the gauge samples of metric whose label name has the value value.
func gaugeSum(reg prometheus.Gatherer, metric, name, value string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					total += m.GetGauge().GetValue()
				}
			}
		}
	}
	return total, nil
}

// histMean is the mean of a histogram over all its label sets (its sum over its count), 0 when empty.
func histMean(reg prometheus.Gatherer, metric string) (float64, error) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, err
	}
	var sum float64
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() != metric {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetHistogram().GetSampleSum()
			n += m.GetHistogram().GetSampleCount()
		}
	}
	if n == 0 {
		return 0, nil
	}
	return sum / float64(n), nil
}

func numCPU() int { return runtime.NumCPU() }
