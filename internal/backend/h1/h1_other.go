//go:build !unix

package h1

import "net"

// connAlive cannot peek at a socket here: a pooled connection is assumed alive (a write into one the
// engine closed fails, and a request of which nothing was written is sent again once).
func connAlive(net.Conn) bool { return true }
