package kube

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/sluicegw/sluice/tests/testenv"
)

// planeOptions are the API server settings a test needs beyond the defaults.
type planeOptions struct {
	// apiserverArgs are appended to the kube-apiserver command line (e.g. --watch-cache=false).
	apiserverArgs []string
}

// controlPlane is one etcd and one kube-apiserver on loopback, with RBAC on, an admin token (system:masters)
// and a service-account signing key, so TokenRequest mints tokens the way the kubelet gets them for pods.
type controlPlane struct {
	t       *testing.T
	dir     string
	opts    planeOptions
	apiPort int
	etcdURL string
	caPEM   []byte

	etcdArgs        []string
	etcd, apiserver *process
	Admin           kubernetes.Interface
	URL             string
}

const adminToken = "sluice-test-admin-token"

func startControlPlane(t *testing.T, opts planeOptions) *controlPlane {
	t.Helper()
	needBinaries(t)
	dir := t.TempDir()
	ports := testenv.FreePorts(t, 3, "127.0.0.1")
	cp := &controlPlane{t: t, dir: dir, opts: opts, apiPort: ports[0], etcdURL: "http://127.0.0.1:" + strconv.Itoa(ports[1])}
	cp.URL = "https://127.0.0.1:" + strconv.Itoa(cp.apiPort)
	cp.writeCredentials()

	peer := "http://127.0.0.1:" + strconv.Itoa(ports[2])
	cp.etcdArgs = []string{"--name=default", "--data-dir=" + filepath.Join(dir, "etcd"),
		"--listen-client-urls=" + cp.etcdURL, "--advertise-client-urls=" + cp.etcdURL,
		"--listen-peer-urls=" + peer, "--initial-advertise-peer-urls=" + peer, "--initial-cluster=default=" + peer,
		"--log-level=warn", "--unsafe-no-fsync"}
	cp.etcd = startProcess(t, "etcd", bins.etcd, cp.etcdArgs...)
	t.Cleanup(func() { cp.etcd.stop() })
	cp.startAPIServer()
	t.Cleanup(func() { cp.apiserver.stop() })

	rc := cp.restConfig(adminToken)
	admin, err := kubernetes.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	cp.Admin = admin
	cp.waitReady()
	return cp
}

// writeCredentials writes the serving CA and certificate, the service-account signing key and the
// static token file (admin only: everyone else authenticates with service-account tokens).
func (cp *controlPlane) writeCredentials() {
	t := cp.t
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sluice-test-ca"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	srv := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "kube-apiserver"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, DNSNames: []string{"localhost"},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srv, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	cp.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})
	write := func(name string, data []byte) {
		if err := os.WriteFile(filepath.Join(cp.dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("serving.crt", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srvDER}))
	write("serving.key", ecPEM(t, srvKey))
	write("sa.key", ecPEM(t, saKey))
	write("tokens.csv", []byte(adminToken+",admin,admin-uid,system:masters\n"))
}

func ecPEM(t *testing.T, k *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

func (cp *controlPlane) startAPIServer() {
	f := func(name string) string { return filepath.Join(cp.dir, name) }
	args := []string{
		"--etcd-servers=" + cp.etcdURL,
		"--bind-address=127.0.0.1", "--secure-port=" + strconv.Itoa(cp.apiPort),
		"--tls-cert-file=" + f("serving.crt"), "--tls-private-key-file=" + f("serving.key"),
		"--authorization-mode=RBAC", "--token-auth-file=" + f("tokens.csv"),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + f("sa.key"), "--service-account-signing-key-file=" + f("sa.key"),
		"--service-cluster-ip-range=10.96.0.0/16",
		// No node runs the kubernetes Service's endpoints here, and 127.0.0.1 may not be advertised.
		"--endpoint-reconciler-type=none", "--advertise-address=10.96.0.1",
		"--enable-priority-and-fairness=false", "--profiling=false",
	}
	cp.apiserver = startProcess(cp.t, "kube-apiserver", bins.apiserver, append(args, cp.opts.apiserverArgs...)...)
}

// restartAPIServer stops the API server by its PID and starts it again on the same port and etcd.
func (cp *controlPlane) restartAPIServer() {
	cp.apiserver.stop()
	cp.startAPIServer()
	cp.waitReady()
}

// restartEtcd stops etcd by its PID and starts it again on its data: the API server's etcd watches
// reconnect and resume from their last revision.
func (cp *controlPlane) restartEtcd() {
	cp.etcd.stop()
	cp.etcd = startProcess(cp.t, "etcd", bins.etcd, cp.etcdArgs...)
	cp.waitReady()
}

// waitReady polls /readyz until the API server (and its RBAC bootstrap roles) answers ok.
func (cp *controlPlane) waitReady() {
	t := cp.t
	deadline := time.Now().Add(3 * time.Minute)
	var last error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		body, err := cp.Admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		cancel()
		if err == nil && bytes.Equal(bytes.TrimSpace(body), []byte("ok")) {
			return
		}
		last = err
		if cp.apiserver.exited() {
			t.Fatalf("kube-apiserver exited:\n%s", cp.apiserver.tail())
		}
		time.Sleep(200 * time.Millisecond) // polling interval: /readyz of a child process is re-checked; each check is a request
	}
	t.Fatalf("kube-apiserver not ready after 3m (%v):\n%s", last, cp.apiserver.tail())
}

func (cp *controlPlane) restConfig(token string) *rest.Config {
	return &rest.Config{Host: cp.URL, BearerToken: token, TLSClientConfig: rest.TLSClientConfig{CAData: cp.caPEM}, QPS: 200, Burst: 400}
}

func (cp *controlPlane) createNamespace(ns string) {
	cp.t.Helper()
	ctx := context.Background()
	if _, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		cp.t.Fatal(err)
	}
	// The controller manager's service-account controller would create "default"; pods need it.
	if _, err := cp.Admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		cp.t.Fatal(err)
	}
}

// kubeconfig mints a token for the service account through TokenRequest (as the kubelet does for a pod's
// projected token) and writes a kubeconfig holding only that token, so whoever uses it has the service
// account's permissions.
func (cp *controlPlane) kubeconfig(ns, serviceAccount string) string {
	t := cp.t
	t.Helper()
	exp := int64(3600)
	tr, err := cp.Admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for serviceaccount %s/%s: %v", ns, serviceAccount, err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: cp.URL, CertificateAuthorityData: cp.caPEM}
	cfg.AuthInfos[serviceAccount] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: serviceAccount, Namespace: ns}
	cfg.CurrentContext = "test"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// process is a child process with its output in a file, stopped by its PID.
type process struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
	err  error
}

func startProcess(t *testing.T, name, bin string, args ...string) *process {
	t.Helper()
	return startProcessEnv(t, name, bin, nil, args...)
}

func startProcessEnv(t *testing.T, name, bin string, env []string, args ...string) *process {
	t.Helper()
	logf, err := os.CreateTemp(t.TempDir(), name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logf.Name(), done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = logf.Close()
		close(p.done)
	}()
	return p
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM to the process's PID and waits; SIGKILL after 30 s. Idempotent.
func (p *process) stop() {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// wait waits for the process to exit on its own, up to d.
func (p *process) wait(d time.Duration) error {
	select {
	case <-p.done:
		return p.err
	case <-time.After(d):
		return errors.New(p.name + " still running")
	}
}

func (p *process) output() string {
	b, _ := os.ReadFile(p.log)
	return string(b)
}

func (p *process) tail() string {
	s := p.output()
	if len(s) > 6000 {
		s = "..." + s[len(s)-6000:]
	}
	return fmt.Sprintf("--- %s (pid %d) ---\n%s", p.name, p.cmd.Process.Pid, s)
}
