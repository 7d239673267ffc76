// Command imagebuild builds sluice's container image without a container daemon and without pulling a
// base image (CI has neither): a static binary on an empty base, written as a tarball that
// `docker load` / `podman load` accept (and `skopeo copy docker-archive:...` pushes). With -verify it
// then reads the tarball back, extracts the entrypoint and runs `sluice version`.
//
//	go run ./tools/imagebuild -out sluice-image.tar -verify
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "imagebuild:", err)
		os.Exit(1)
	}
}

func run() error {
	out := flag.String("out", "sluice-image.tar", "image tarball to write")
	binary := flag.String("binary", "", "prebuilt static linux sluice binary; empty builds ./cmd/sluice")
	arch := flag.String("arch", runtime.GOARCH, "image architecture (GOARCH)")
	repo := flag.String("repo", "sluice", "image repository name recorded in the tarball")
	certs := flag.String("ca-certs", "/etc/ssl/certs/ca-certificates.crt", "CA bundle to include; empty or missing = none")
	verify := flag.Bool("verify", false, "read the image back, extract the entrypoint and run `sluice version`")
	flag.Parse()

	work, err := os.MkdirTemp("", "imagebuild")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	if *binary == "" {
		if *binary, err = buildBinary(".", work, *arch); err != nil {
			return err
		}
	}
	version := "unknown"
	if *arch == runtime.GOARCH {
		b, err := exec.Command(*binary, "version").Output()
		if err != nil {
			return fmt.Errorf("%s version: %w", *binary, err)
		}
		version = strings.TrimPrefix(strings.TrimSpace(string(b)), "sluice ")
	}
	if _, err := os.Stat(*certs); err != nil {
		*certs = ""
	}
	created := time.Unix(0, 0).UTC()
	if epoch, err := strconv.ParseInt(os.Getenv("SOURCE_DATE_EPOCH"), 10, 64); err == nil {
		created = time.Unix(epoch, 0).UTC()
	}
	img, err := Build(Spec{Binary: *binary, Version: version, Arch: *arch, CACerts: *certs, Created: created})
	if err != nil {
		return err
	}
	tag, err := name.NewTag(*repo + ":" + version)
	if err != nil {
		return err
	}
	if err := tarball.WriteToFile(*out, tag, img); err != nil {
		return err
	}
	digest, err := img.Digest()
	if err != nil {
		return err
	}
	st, err := os.Stat(*out)
	if err != nil {
		return err
	}
	fmt.Printf("wrote %s: %s %s, %.1f MiB\n", *out, tag, digest, float64(st.Size())/(1<<20))
	if *verify {
		got, err := Verify(*out, work)
		if err != nil {
			return err
		}
		fmt.Printf("entrypoint runs: %s\n", got)
	}
	return nil
}
