//go:build !unix

package enginerpc

import "net"

// peekConn cannot look at a socket here: an idle connection is taken as open with nothing pending,
// and a call that fails to send on it goes again on a new one (h2Call).
func peekConn(net.Conn) (open, pending bool) { return true, false }
