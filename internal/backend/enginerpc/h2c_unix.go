//go:build unix

package enginerpc

import (
	"errors"
	"net"
	"syscall"
)

// connAliveRaw reports whether an idle connection is open with nothing unread: one non-blocking peek
// at the socket (as the HTTP/1 client checks its pooled connections).
func connAliveRaw(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
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
		alive = n < 0 && errors.Is(rerr, syscall.EAGAIN) // EAGAIN: open and idle; 0: closed; bytes: unasked
		return true
	})
	return err == nil && alive
}
