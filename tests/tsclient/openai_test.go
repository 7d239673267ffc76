package tsclient

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sluicegw/sluice/internal/app"
	"github.com/sluicegw/sluice/internal/config"
	"github.com/sluicegw/sluice/internal/sim"
)

// TestOpenAINodeSDK runs openai.test.mjs: the official OpenAI SDK for Node calls embeddings (and chat)
// through a gateway in front of simulated SGLang engines.
func TestOpenAINodeSDK(t *testing.T) {
	node := requireNode(t)
	if _, err := os.Stat(filepath.Join("node_modules", "openai", "package.json")); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("tests/tsclient/node_modules lacks openai (CI is set, so this is a failure): %v", err)
		}
		t.Skipf("tests/tsclient/node_modules lacks openai; run `npm ci` there: %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cluster, err := sim.StartCluster(ctx, sim.ClusterConfig{Regular: 2, Protocol: sim.ProtocolSGLang, Mode: sim.ModeInstant})
	if err != nil {
		t.Fatalf("sim: %v", err)
	}
	defer func() { _ = cluster.Close() }()
	args := []string{"--host", "127.0.0.1", "--port", "0", "--shutdown-grace-period-secs", "5", "--disable-health-check"}
	for _, e := range cluster.Engines {
		args = append(args, "--worker-urls", e.URL())
	}
	cfg, err := config.Parse(args, io.Discard)
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.New(ctx, cfg, app.Options{})
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	if err := a.Start(ctx); err != nil {
		t.Fatalf("start: %v", err)
	}
	defer func() {
		sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer scancel()
		if err := a.Shutdown(sctx); err != nil {
			t.Errorf("shutdown: %v", err)
		}
	}()

	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "openai.test.mjs")
	cmd.Env = append(os.Environ(),
		"SLUICE_URL=http://"+a.Addr(),
		"SLUICE_MODEL="+cluster.Engines[0].Config().Models[0],
		"SLUICE_EMBED_DIM="+strconv.Itoa(sim.EmbeddingDim),
		"NO_COLOR=1",
	)
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			t.Fatalf("node test timed out: %v\n%s", err, out)
		}
		t.Fatalf("node --test openai.test.mjs failed: %v\n%s", err, out)
	}
	t.Logf("node --test openai.test.mjs passed:\n%s", out)
}
