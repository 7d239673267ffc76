//go:build !unix

package enginerpc

import "net"

// connAliveRaw cannot peek at a socket here: an idle connection is taken as open, and a call that
// fails to send on it goes again on a new one (h2Call).
func connAliveRaw(net.Conn) bool { return true }
