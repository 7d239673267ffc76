package kvevents

import (
	"errors"

	"github.com/sluicegw/sluice/internal/kvevents/kvspec"
)

// Frame and payload errors: the subscriber counts and logs them and drops the frame. Every one is
// wrapped by ErrMalformed so callers can tell bad input from transport failures.
var (
	ErrMalformed = errors.New("kvevents: malformed event frame")

	ErrFrameCount   = errors.New("want 3 frames [topic, seq, payload]")
	ErrSeqLength    = errors.New("sequence frame is not 8 bytes")
	ErrPayload      = errors.New("payload is not a KVEventBatch")
	ErrUnknownEvent = errors.New("unknown event tag")
)

// Connection errors: the publisher could not be reached; the subscriber retries.
var (
	ErrDial = errors.New("kvevents: publisher unreachable")
)

// Configuration errors, returned by constructors; an endpoint spec's (kvspec.Parse) are the same.
var (
	ErrConfig = kvspec.ErrConfig
)

// Replay errors: a gap the replay socket could not fill; the subscriber then clears the worker's
// index.
var (
	ErrReplay = errors.New("kvevents: replay failed")

	ErrNoReplayEndpoint = errors.New("no replay endpoint configured")
	ErrReplayIncomplete = errors.New("replay buffer no longer holds the missing batches")
	// ErrRestarted: the replay socket's batch at our last sequence number is not the one we applied,
	// so the sequence belongs to a new engine process.
	ErrRestarted = errors.New("publisher restarted")
)
