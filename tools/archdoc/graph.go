package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strings"
)

// module is the import path every package of the house starts with.
const module = "github.com/sluicegw/sluice"

// pkg is one package as `go list -json` describes it.
type pkg struct {
	ImportPath   string
	Imports      []string
	TestImports  []string
	XTestImports []string
	Deps         []string
}

// house is the module's import graph: each package's own imports plus those of its in-package test
// files (test helpers included), and, apart, the external test packages (p_test), which sit above
// what they import and may import the package they test.
type house struct {
	pkgs  map[string]*pkg     // by short name (the path without the module prefix)
	edges map[string][]string // short name -> the module packages it imports, tests included
	xtest map[string][]string // short name -> the module packages its external tests import
	floor map[string]int
}

// short is a package's name in the doc: its path inside the module, less a leading internal/.
func short(path string) string {
	s := strings.TrimPrefix(strings.TrimPrefix(path, module), "/")
	return strings.TrimPrefix(s, "internal/")
}

// inHouse reports whether a short name is a package of the floor table: generated code (gen/) is
// left out, since it is written by buf, not by hand, and imports nothing of ours.
func inHouse(name string) bool { return name != "" && !strings.HasPrefix(name, "gen/") }

// load lists the module's packages from dir (the module root) and computes their floors.
func load(dir string) (*house, error) {
	cmd := exec.Command("go", "list", "-json=ImportPath,Imports,TestImports,XTestImports,Deps", "./...")
	cmd.Dir = dir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %w: %s", err, stderr.String())
	}
	h := &house{pkgs: map[string]*pkg{}, edges: map[string][]string{}, xtest: map[string][]string{}}
	dec := json.NewDecoder(bytes.NewReader(out))
	for dec.More() {
		p := new(pkg)
		if err := dec.Decode(p); err != nil {
			return nil, err
		}
		name := short(p.ImportPath)
		if !inHouse(name) {
			continue
		}
		h.pkgs[name] = p
		h.edges[name] = ours(name, p.Imports, p.TestImports)
		if len(p.XTestImports) > 0 {
			h.xtest[name] = ours(name, p.XTestImports)
		}
	}
	if err := h.computeFloors(); err != nil {
		return nil, err
	}
	return h, nil
}

// ours returns the house packages among imports, sorted, without duplicates and without self.
func ours(self string, imports ...[]string) []string {
	var out []string
	for _, list := range imports {
		for _, path := range list {
			if !strings.HasPrefix(path, module+"/") {
				continue
			}
			if n := short(path); inHouse(n) && n != self {
				out = append(out, n)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// computeFloors sets each package's floor: 1 for a package importing nothing of the house, else one
// more than the highest floor it imports (the longest path down to a leaf).
func (h *house) computeFloors() error {
	h.floor = make(map[string]int, len(h.edges))
	const visiting = -1
	var visit func(n string, path []string) (int, error)
	visit = func(n string, path []string) (int, error) {
		switch f := h.floor[n]; f {
		case visiting:
			return 0, fmt.Errorf("import cycle: %s", strings.Join(append(path, n), " -> "))
		case 0:
		default:
			return f, nil
		}
		h.floor[n] = visiting
		f := 1
		for _, d := range h.edges[n] {
			g, err := visit(d, append(path, n))
			if err != nil {
				return 0, err
			}
			f = max(f, g+1)
		}
		h.floor[n] = f
		return f, nil
	}
	for _, n := range h.names() {
		if _, err := visit(n, nil); err != nil {
			return err
		}
	}
	return nil
}

// names returns the house's packages, sorted.
func (h *house) names() []string {
	ns := make([]string, 0, len(h.edges))
	for n := range h.edges {
		ns = append(ns, n)
	}
	slices.Sort(ns)
	return ns
}

// xtestFloor is the floor of p's external test package: one above the highest package it imports.
func (h *house) xtestFloor(p string) int {
	f := 1
	for _, d := range h.xtest[p] {
		f = max(f, h.floor[d]+1)
	}
	return f
}

// floors is the number of floors: the highest floor of any package or external test package.
func (h *house) floors() int {
	n := 0
	for p, f := range h.floor {
		n = max(n, f)
		if _, ok := h.xtest[p]; ok {
			n = max(n, h.xtestFloor(p))
		}
	}
	return n
}

// byFloor returns the packages of each floor, floor 1 first, each floor's sorted.
func (h *house) byFloor() [][]string {
	var out [][]string
	for _, n := range h.names() {
		f := h.floor[n]
		for len(out) < f {
			out = append(out, nil)
		}
		out[f-1] = append(out[f-1], n)
	}
	return out
}

// linking returns the house packages whose build (tests left out) depends on a module path with
// one of the given prefixes.
func (h *house) linking(prefixes ...string) map[string][]string {
	out := map[string][]string{}
	for _, n := range h.names() {
		for _, d := range h.pkgs[n].Deps {
			for _, p := range prefixes {
				if d == p || strings.HasPrefix(d, p+"/") {
					out[n] = append(out[n], d)
				}
			}
		}
	}
	return out
}
