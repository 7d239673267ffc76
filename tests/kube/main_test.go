package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

const repoRoot = "../.."

// bins are the binaries every test of the package shares, built once in TestMain.
var bins struct {
	apiserver, etcd, sluice string
	err                     error // why they could not be built; each test then fails with it
}

func TestMain(m *testing.M) {
	if os.Getenv("SLUICE_KUBE_SKIP") != "" {
		fmt.Println("tests/kube: skipped because SLUICE_KUBE_SKIP is set (the real-API-server suite did not run)")
		os.Exit(0)
	}
	tmp, err := os.MkdirTemp("", "sluice-kube-bin")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// A build failure fails the package, even when -run selects no test (CI builds with -run '^$').
	if bins.err = buildBinaries(tmp); bins.err != nil {
		fmt.Fprintln(os.Stderr, "tests/kube: building the control plane:", bins.err)
		_ = os.RemoveAll(tmp)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(tmp)
	os.Exit(code)
}

func needBinaries(t *testing.T) {
	t.Helper()
	if bins.err != nil {
		t.Fatalf("building the control plane: %v", bins.err)
	}
}

// buildBinaries builds kube-apiserver and etcd into a cache directory keyed by the tools module's
// contents (reused across runs: `go build` of kube-apiserver is the expensive part), and the gateway into
// tmp (fresh: it is what is under test).
func buildBinaries(tmp string) error {
	toolsDir := filepath.Join(repoRoot, "tools", "kube")
	dir, err := cacheDir(toolsDir)
	if err != nil {
		return err
	}
	bins.apiserver, bins.etcd = filepath.Join(dir, "kube-apiserver"), filepath.Join(dir, "etcd")
	if !exists(bins.apiserver) || !exists(bins.etcd) {
		// Built beside the final place and renamed, so an interrupted or concurrent build never leaves a
		// half-written binary that a later run would take for cached.
		stage, err := os.MkdirTemp(dir, "build")
		if err != nil {
			return err
		}
		defer os.RemoveAll(stage)
		cmd := exec.Command("go", "build", "-trimpath", "-o", stage+"/", "k8s.io/kubernetes/cmd/kube-apiserver", "./etcd")
		cmd.Dir = toolsDir
		cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build in tools/kube: %w\n%s", err, out)
		}
		for _, b := range []string{"kube-apiserver", "etcd"} {
			if err := os.Rename(filepath.Join(stage, b), filepath.Join(dir, b)); err != nil {
				return err
			}
		}
	}
	bins.sluice = filepath.Join(tmp, "sluice")
	cmd := exec.Command("go", "build", "-o", bins.sluice, "./cmd/sluice")
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/sluice: %w\n%s", err, out)
	}
	return nil
}

// cacheDir is $SLUICE_KUBE_CACHE, else the user cache's sluice/kube, with one subdirectory per content of
// tools/kube (its go.mod and go.sum pin kube-apiserver's and etcd's versions).
func cacheDir(toolsDir string) (string, error) {
	root := os.Getenv("SLUICE_KUBE_CACHE")
	if root == "" {
		uc, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("no cache directory (set SLUICE_KUBE_CACHE): %w", err)
		}
		root = filepath.Join(uc, "sluice", "kube")
	}
	h := sha256.New()
	for _, f := range []string{"go.mod", "go.sum", "etcd/main.go"} {
		b, err := os.ReadFile(filepath.Join(toolsDir, f))
		if err != nil {
			return "", err
		}
		h.Write(b)
	}
	dir := filepath.Join(root, hex.EncodeToString(h.Sum(nil))[:16])
	return dir, os.MkdirAll(dir, 0o755)
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
