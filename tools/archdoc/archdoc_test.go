package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// The plan the house is held to (issue 33): few floors, and cluster low enough that the request path
// never sits under it.
const (
	maxFloors       = 10
	maxClusterFloor = 3
)

// zeroMQ are the modules that only the KV-event subscriber and the simulator may link.
var zeroMQ = []string{"github.com/go-zeromq/zmq4", "github.com/vmihailenco/msgpack"}

// zeroMQOwners are the packages below dispatch whose job is ZeroMQ: the transport, the KV-event
// subscriber, and the engine simulator (with its command and its test harness) that publishes events.
var zeroMQOwners = []string{"zmqnet", "kvevents", "sim", "cmd/sluice-sim", "tests/testenv/eventsim"}

var (
	loadOnce sync.Once
	loaded   *house
	loadErr  error
)

func theHouse(t *testing.T) *house {
	t.Helper()
	loadOnce.Do(func() { loaded, loadErr = load(filepath.Join("..", "..")) })
	if loadErr != nil {
		t.Fatal(loadErr)
	}
	return loaded
}

// TestDocIsFresh: docs/architecture.md's floor table is what `go list` says today.
func TestDocIsFresh(t *testing.T) {
	t.Parallel()
	h := theHouse(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", docPath))
	if err != nil {
		t.Fatal(err)
	}
	want, err := replaceSection(doc, renderFloors(h))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(doc, want) {
		t.Fatalf("%s's floor table disagrees with go list: run %s and commit the result\n\nwant:\n%s",
			docPath, regenerate, renderFloors(h))
	}
}

// TestDocNamesEveryPackage: the doc's "One paragraph per package" names each package of the code
// (commands, tests and tools aside) and no package that is gone.
func TestDocNamesEveryPackage(t *testing.T) {
	t.Parallel()
	h := theHouse(t)
	doc, err := os.ReadFile(filepath.Join("..", "..", docPath))
	if err != nil {
		t.Fatal(err)
	}
	named := paragraphNames(string(doc))
	if len(named) == 0 {
		t.Fatalf("%s has no \"## One paragraph per package\" section naming packages in **bold**", docPath)
	}
	var want []string
	for _, n := range h.names() {
		if !aside(n) {
			want = append(want, n)
		}
	}
	for _, n := range want {
		if !slices.Contains(named, n) {
			t.Errorf("%s: no paragraph names package %s (add a **%s** line)", docPath, n, n)
		}
	}
	for _, n := range named {
		if !slices.Contains(want, n) {
			t.Errorf("%s: a paragraph names **%s**, which is no package of the code", docPath, n)
		}
	}
}

// aside reports whether a package is left out of the paragraphs: commands are wiring, tests and
// tools are not the product.
func aside(name string) bool {
	for _, p := range []string{"cmd/", "tests/", "tools/", "deploy/"} {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

var boldName = regexp.MustCompile(`\*\*([a-z0-9/]+)\*\*`)

// paragraphNames returns the **bold** names of the doc's "One paragraph per package" section.
func paragraphNames(doc string) []string {
	_, sec, ok := strings.Cut(doc, "\n## One paragraph per package\n")
	if !ok {
		return nil
	}
	if i := strings.Index(sec, "\n## "); i >= 0 {
		sec = sec[:i]
	}
	var out []string
	for _, m := range boldName.FindAllStringSubmatch(sec, -1) {
		out = append(out, m[1])
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestHouseKeepsItsPlan: the import graph, test helpers included, has at most maxFloors floors and
// cluster sits no higher than maxClusterFloor.
func TestHouseKeepsItsPlan(t *testing.T) {
	t.Parallel()
	h := theHouse(t)
	if n := h.floors(); n > maxFloors {
		t.Errorf("the house has %d floors, want at most %d:\n%s", n, maxFloors, renderFloors(h))
	}
	if f := h.floor["cluster"]; f == 0 || f > maxClusterFloor {
		t.Errorf("cluster is on floor %d, want 1..%d; it imports %v", f, maxClusterFloor, h.edges["cluster"])
	}
}

// TestNoZeroMQBelowDispatch: no package below dispatch's floor links ZeroMQ or msgpack, except the
// packages whose job that is. depguard sees only direct imports; this sees the transitive ones.
func TestNoZeroMQBelowDispatch(t *testing.T) {
	t.Parallel()
	h := theHouse(t)
	top := h.floor["dispatch"]
	if top == 0 {
		t.Fatal("no package dispatch in the house")
	}
	for p, deps := range h.linking(zeroMQ...) {
		if h.floor[p] < top && !slices.Contains(zeroMQOwners, p) {
			t.Errorf("%s (floor %d, below dispatch's %d) links %v; only %v may", p, h.floor[p], top, deps, zeroMQOwners)
		}
	}
}
