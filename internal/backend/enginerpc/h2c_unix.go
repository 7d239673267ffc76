//go:build unix

package enginerpc

import (
	"errors"
	"net"
	"syscall"
)

// peekConn looks at an idle connection's socket without reading it: open is false once the engine
// closed it (or it cannot be looked at), pending is true when bytes wait to be read. One non-blocking
// peek, as the HTTP/1 client checks its pooled connections.
func peekConn(nc net.Conn) (open, pending bool) {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false, false
	}
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		switch {
		case n > 0:
			open, pending = true, true
		case n < 0 && errors.Is(rerr, syscall.EAGAIN):
			open = true
		}
		return true
	})
	return open && err == nil, pending
}
