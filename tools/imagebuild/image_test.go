package main

import (
	"archive/tar"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// TestImageRunsSluiceVersion builds the real gateway binary, the image around it, writes it as a
// loadable tarball, and checks it the way a runtime would use it: config, files, and the extracted
// entrypoint running `sluice version`.
func TestImageRunsSluiceVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the sluice binary")
	}
	dir := t.TempDir()
	bin, err := buildBinary("../..", dir, runtime.GOARCH)
	if err != nil {
		t.Fatal(err)
	}
	// Stripped: no symbol table, no DWARF (97 MB unstripped, 68 MB stripped, measured at go1.26.8).
	ef, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	for _, sec := range ef.Sections {
		if sec.Name == ".symtab" || strings.HasPrefix(sec.Name, ".debug_") || strings.HasPrefix(sec.Name, ".zdebug_") {
			t.Errorf("the image's binary is not stripped: it has section %s", sec.Name)
		}
	}
	_ = ef.Close()
	img, err := Build(Spec{Binary: bin, Version: "test", Arch: runtime.GOARCH, Created: time.Unix(0, 0)})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(path, name.MustParseReference("sluice:test").(name.Tag), img); err != nil {
		t.Fatal(err)
	}

	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cf.Config.User != "65532:65532" || !slices.Equal(cf.Config.Entrypoint, []string{entrypoint}) ||
		!slices.Equal(cf.Config.Cmd, []string{"serve"}) || cf.OS != "linux" || cf.Architecture != runtime.GOARCH {
		t.Fatalf("config = %+v", cf)
	}
	var files []string
	tr := tar.NewReader(mutate.Extract(img))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, h.Name)
		if h.Uid != 0 && h.Name == "usr/local/bin/sluice" {
			t.Errorf("binary owned by uid %d: the non-root user must not be able to replace it", h.Uid)
		}
	}
	want := []string{"etc", "etc/passwd", "etc/group", "tmp", "usr", "usr/local", "usr/local/bin", "usr/local/bin/sluice"}
	if !slices.Equal(files, want) {
		t.Errorf("image files = %v, want %v", files, want)
	}

	out, err := Verify(path, dir)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(out, "sluice ") {
		t.Fatalf("sluice version printed %q", out)
	}
}

func TestVerifyRejectsRootImage(t *testing.T) {
	dir := t.TempDir()
	fake := filepath.Join(dir, "bin")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\necho sluice x\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	img, err := Build(Spec{Binary: fake, Version: "x", Arch: runtime.GOARCH})
	if err != nil {
		t.Fatal(err)
	}
	cf, _ := img.ConfigFile()
	cf = cf.DeepCopy()
	cf.Config.User = "0"
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "image.tar")
	if err := tarball.WriteToFile(path, name.MustParseReference("sluice:x").(name.Tag), img); err != nil {
		t.Fatal(err)
	}
	if _, err := Verify(path, dir); err == nil || !strings.Contains(err.Error(), "runs as root") {
		t.Fatalf("Verify(root image) = %v, want a runs-as-root error", err)
	}
}
