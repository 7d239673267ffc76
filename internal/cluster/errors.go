package cluster

import (
	"errors"
	"net"
	"syscall"
)

// Configuration errors (New and FindSelf):
var (
	// ErrInvalidConfig wraps every configuration problem.
	ErrInvalidConfig = errors.New("invalid cluster admission configuration")
	// ErrSelfNotFound: no peer URL (or more than one) names this replica's own listener.
	ErrSelfNotFound = errors.New("this replica is not in --admission-peers")
)

// Coordination refusals, answered to a replica's Exchange (FailedPrecondition on the wire): the replica
// keeps its lease and tries again at its next exchange.
var (
	// ErrNotCoordinator: the callee does not coordinate (now).
	ErrNotCoordinator = errors.New("not the admission coordinator")
	// ErrNotMember: the caller is not a member of the fleet the coordinator knows.
	ErrNotMember = errors.New("not a member of the admission fleet")
	// ErrProtocolVersion: the caller speaks another version of the coordination protocol.
	ErrProtocolVersion = errors.New("unsupported coordination protocol version")
	// ErrNotStarted: the replica has not started coordination yet.
	ErrNotStarted = errors.New("cluster admission not started")
)

// ErrBadRequest wraps a malformed report (InvalidArgument on the wire).
var ErrBadRequest = errors.New("malformed coordination request")

// errNoCoordinator: the replica knows no coordinator to report to.
var errNoCoordinator = errors.New("no admission coordinator known")

// refused reports whether err says that nothing listens at the peer's address: the process is gone (or
// not started). Timeouts and other failures say nothing about the peer's life.
func refused(err error) bool {
	if errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial" && errors.Is(op.Err, syscall.ECONNREFUSED)
}
