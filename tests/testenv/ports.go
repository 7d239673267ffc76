package testenv

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
)

// FreePorts returns n distinct ports that are free on every one of hosts (127.0.0.1 when none is given),
// for tests whose flags must name a port before the gateway binds it.
//
// A port taken from the kernel with ":0" and released again lies in the ephemeral range, where the kernel
// hands out ports for every outbound connection and every ":0" listener of the test binaries running in
// parallel; one of those can take it before the gateway binds it (seen in CI: "bind: address already in
// use"). Ports below the ephemeral range are never handed out by the kernel, so only another test choosing
// the same random port could collide, and each port is checked to be bindable before it is returned.
func FreePorts(t testing.TB, n int, hosts ...string) []int {
	t.Helper()
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1"}
	}
	lo, hi := 10000, ephemeralLow()
	seen := map[int]bool{}
	var ports []int
	for tries := 0; len(ports) < n; tries++ {
		if tries > 1000 {
			t.Fatalf("no %d free ports in [%d, %d)", n, lo, hi)
		}
		p := lo + rand.IntN(hi-lo)
		if seen[p] || !bindable(p, hosts) {
			continue
		}
		seen[p] = true
		ports = append(ports, p)
	}
	return ports
}

// FreePort is FreePorts for one port.
func FreePort(t testing.TB, hosts ...string) int {
	t.Helper()
	return FreePorts(t, 1, hosts...)[0]
}

func bindable(port int, hosts []string) bool {
	for _, h := range hosts {
		ln, err := net.Listen("tcp", net.JoinHostPort(h, strconv.Itoa(port)))
		if err != nil {
			return false
		}
		ln.Close()
	}
	return true
}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux; 32768 elsewhere or when unreadable).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	p, err := strconv.Atoi(f[0])
	if err != nil || p <= 11000 {
		return 32768
	}
	return p
}
