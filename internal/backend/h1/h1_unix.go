//go:build unix

package h1

import (
	"errors"
	"net"
	"syscall"
)

// connAlive reports whether a pooled connection can carry a request: its engine has not closed it
// and has sent nothing unasked. One non-blocking peek at the socket, without waiting.
func connAlive(c net.Conn) bool {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, rerr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		// EAGAIN: nothing to read, the connection is open and idle. 0 bytes: the engine closed it.
		// Bytes: something nobody asked for.
		alive = n < 0 && errors.Is(rerr, syscall.EAGAIN)
		return true
	})
	return err == nil && alive
}
