package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The image's layout, the same as the Dockerfile's.
const (
	entrypoint = "/usr/local/bin/sluice"
	uid        = 65532 // "nonroot", as in distroless
	mainPort   = "30000/tcp"
)

// Spec is what goes into the image.
type Spec struct {
	// Binary is a static linux sluice binary.
	Binary string
	// Version labels the image (org.opencontainers.image.version).
	Version string
	// Arch is the image's CPU architecture (GOARCH).
	Arch string
	// CACerts, when set, is a PEM bundle installed as /etc/ssl/certs/ca-certificates.crt (for https
	// engines and OTLP collectors); the empty base has none.
	CACerts string
	// Created stamps the config and every file, for reproducible digests.
	Created time.Time
}

// Build makes the image on an empty base: one layer with the binary, a passwd/group entry for the
// non-root user, /tmp, and optionally CA certificates; config with a non-root user and the binary as
// entrypoint. Nothing is pulled and no daemon is needed.
func Build(s Spec) (v1.Image, error) {
	bin, err := os.ReadFile(s.Binary)
	if err != nil {
		return nil, err
	}
	var certs []byte
	if s.CACerts != "" {
		if certs, err = os.ReadFile(s.CACerts); err != nil {
			return nil, err
		}
	}
	layerTar, err := rootfs(bin, certs, s.Created)
	if err != nil {
		return nil, err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(layerTar)), nil
	})
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", s.Arch
	cf.Created = v1.Time{Time: s.Created}
	cf.Config = v1.Config{
		User:         fmt.Sprintf("%d:%d", uid, uid),
		Entrypoint:   []string{entrypoint},
		Cmd:          []string{"serve"},
		Env:          []string{"PATH=/usr/local/bin"},
		WorkingDir:   "/",
		ExposedPorts: map[string]struct{}{mainPort: {}},
		Labels: map[string]string{
			"org.opencontainers.image.title":       "sluice",
			"org.opencontainers.image.description": "LLM inference gateway for prefill/decode disaggregated serving",
			"org.opencontainers.image.version":     s.Version,
			"org.opencontainers.image.licenses":    "Apache-2.0",
		},
	}
	return mutate.ConfigFile(img, cf)
}

// rootfs writes the layer's tar.
func rootfs(bin, certs []byte, mtime time.Time) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dir := func(name string, mode int64) error {
		return tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: mode, ModTime: mtime, Format: tar.FormatPAX})
	}
	file := func(name string, mode int64, data []byte) error {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX}); err != nil {
			return err
		}
		_, err := tw.Write(data)
		return err
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:%d:%d:nonroot:/home/nonroot:/sbin/nologin\n", uid, uid)
	group := fmt.Sprintf("root:x:0:\nnonroot:x:%d:\n", uid)
	steps := []error{
		dir("etc", 0o755), file("etc/passwd", 0o644, []byte(passwd)), file("etc/group", 0o644, []byte(group)),
		dir("tmp", 0o1777), dir("usr", 0o755), dir("usr/local", 0o755), dir("usr/local/bin", 0o755),
		file(strings.TrimPrefix(entrypoint, "/"), 0o755, bin),
	}
	if certs != nil {
		steps = append(steps, dir("etc/ssl", 0o755), dir("etc/ssl/certs", 0o755), file("etc/ssl/certs/ca-certificates.crt", 0o644, certs))
	}
	if err := errors.Join(steps...); err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Verify reads an image tarball back as a container runtime would, checks its config (non-root user,
// entrypoint), extracts the entrypoint binary from the flattened filesystem and runs it with
// "version". It returns that output.
func Verify(tarPath, workDir string) (string, error) {
	img, err := tarball.ImageFromPath(tarPath, nil)
	if err != nil {
		return "", err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	c := cf.Config
	if u := strings.SplitN(c.User, ":", 2)[0]; u == "" || u == "0" || u == "root" {
		return "", fmt.Errorf("image runs as root (user %q)", c.User)
	}
	if len(c.Entrypoint) == 0 {
		return "", errors.New("image has no entrypoint")
	}
	want := strings.TrimPrefix(path.Clean(c.Entrypoint[0]), "/")
	rc := mutate.Extract(img)
	defer rc.Close()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("entrypoint %s not in the image", c.Entrypoint[0])
		}
		if err != nil {
			return "", err
		}
		if strings.TrimPrefix(path.Clean(h.Name), "/") != want {
			continue
		}
		if h.Mode&0o111 == 0 || h.Typeflag != tar.TypeReg {
			return "", fmt.Errorf("entrypoint %s is not an executable file (mode %o)", h.Name, h.Mode)
		}
		out := filepath.Join(workDir, "entrypoint")
		f, err := os.OpenFile(out, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return "", err
		}
		_, err = io.Copy(f, tr)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return "", err
		}
		b, err := exec.Command(out, "version").CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("%s version: %w: %s", c.Entrypoint[0], err, b)
		}
		return strings.TrimSpace(string(b)), nil
	}
}

// buildBinary compiles a static sluice binary for linux/arch into dir.
func buildBinary(repo, dir, arch string) (string, error) {
	out := filepath.Join(dir, "sluice")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, "./cmd/sluice")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH="+arch)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %w: %s", err, b)
	}
	return out, nil
}
