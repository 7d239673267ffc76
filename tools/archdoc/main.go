// Command archdoc measures the house, the module's import graph with test helpers included, and
// writes its floor table into docs/architecture.md between the archdoc markers, so the doc is drawn
// from `go list` rather than kept by hand. Its tests fail when the committed doc is stale, when the
// house outgrows its plan (floors, cluster's floor) and when a package below dispatch links ZeroMQ.
//
//	go run ./tools/archdoc      # rewrite docs/architecture.md's floor table
//	go run ./tools/archdoc -n   # print the table and the figures, write nothing
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

//go:generate go run .

// docPath is the architecture doc, relative to the module root.
const docPath = "docs/architecture.md"

// The generated section of the doc lies between these lines.
const (
	beginMarker = "<!-- archdoc:floors begin (go run ./tools/archdoc rewrites this section) -->"
	endMarker   = "<!-- archdoc:floors end -->"
)

// regenerate is what a stale doc's message tells the reader to run.
const regenerate = "go run ./tools/archdoc"

func main() {
	dryRun := flag.Bool("n", false, "print the floor table and figures; do not write "+docPath)
	flag.Parse()
	if err := run(*dryRun); err != nil {
		fmt.Fprintln(os.Stderr, "archdoc:", err)
		os.Exit(1)
	}
}

func run(dryRun bool) error {
	root, err := moduleRoot()
	if err != nil {
		return err
	}
	h, err := load(root)
	if err != nil {
		return err
	}
	table := renderFloors(h)
	if dryRun {
		fmt.Print(table)
		fmt.Printf("\nfloors (external tests included): %d; cluster on floor %d; dispatch on floor %d\n",
			h.floors(), h.floor["cluster"], h.floor["dispatch"])
		return nil
	}
	path := filepath.Join(root, docPath)
	doc, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	out, err := replaceSection(doc, table)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, 0o644)
}

// moduleRoot is the directory of the main module's go.mod.
func moduleRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	gomod := strings.TrimSpace(string(out))
	if gomod == "" || gomod == os.DevNull {
		return "", errors.New("not inside the module")
	}
	return filepath.Dir(gomod), nil
}

// renderFloors writes the floor table: one row per floor, its packages in backquotes.
func renderFloors(h *house) string {
	var b strings.Builder
	b.WriteString("| floor | packages |\n|---|---|\n")
	for i, names := range h.byFloor() {
		quoted := make([]string, len(names))
		for j, n := range names {
			quoted[j] = "`" + n + "`"
		}
		fmt.Fprintf(&b, "| %d | %s |\n", i+1, strings.Join(quoted, ", "))
	}
	fmt.Fprintf(&b, "\n%d floors, counting the external test packages (`x_test`), which sit one above the highest package they import.\n", h.floors())
	return b.String()
}

// replaceSection puts section between the markers of doc.
func replaceSection(doc []byte, section string) ([]byte, error) {
	before, rest, ok := bytes.Cut(doc, []byte(beginMarker+"\n"))
	if !ok {
		return nil, fmt.Errorf("%s has no line %q", docPath, beginMarker)
	}
	_, after, ok := bytes.Cut(rest, []byte(endMarker))
	if !ok {
		return nil, fmt.Errorf("%s has no line %q", docPath, endMarker)
	}
	var out bytes.Buffer
	out.Write(before)
	out.WriteString(beginMarker + "\n")
	out.WriteString(section)
	out.WriteString(endMarker)
	out.Write(after)
	return out.Bytes(), nil
}
