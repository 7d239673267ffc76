package auth

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"
)

// Key is one API key as kept in memory: its id and the SHA-256 of the key, never the key itself.
type Key struct {
	// ID names the key in logs, spans and audit lines.
	ID string
	// Admin keys also grant the admin API.
	Admin bool
	hash  [sha256.Size]byte
}

// KeyID returns the id logged for a key given without one: "key-" and the first 8 hex digits of its
// SHA-256 (enough to tell keys apart in logs, useless for guessing the key).
func KeyID(key string) string {
	h := sha256.Sum256([]byte(key))
	return "key-" + hex.EncodeToString(h[:4])
}

// NewKey returns the in-memory form of key.
func NewKey(id, key string, admin bool) Key {
	return Key{ID: id, Admin: admin, hash: sha256.Sum256([]byte(key))}
}

// ParseKeys parses an API keys file. Each non-blank line that does not start with # is
//
//	KEY                  an inference key, logged as KeyID(KEY)
//	ID KEY               an inference key logged as ID
//	ID KEY ROLE          ROLE is "inference" or "admin" (admin keys also grant the admin API)
//
// separated by spaces or tabs. Errors name the line, never its content: the file holds secrets.
func ParseKeys(data []byte) ([]Key, error) {
	if !utf8.Valid(data) {
		return nil, fmt.Errorf("%w: file is not UTF-8 text", ErrKeysFile)
	}
	var keys []Key
	ids := map[string]int{}
	hashes := map[[sha256.Size]byte]int{}
	for n, line := range bytes.Split(data, []byte("\n")) {
		lineNo := n + 1
		text := strings.TrimSpace(string(line))
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		var id, key string
		admin := false
		switch len(fields) {
		case 1:
			key = fields[0]
			id = KeyID(key)
		case 2, 3:
			id, key = fields[0], fields[1]
			if len(fields) == 3 {
				switch fields[2] {
				case "inference":
				case "admin":
					admin = true
				default:
					return nil, fmt.Errorf("%w: line %d: role must be inference or admin", ErrKeysFile, lineNo)
				}
			}
		default:
			return nil, fmt.Errorf("%w: line %d: want KEY, ID KEY or ID KEY ROLE", ErrKeysFile, lineNo)
		}
		if !printableID(id) {
			return nil, fmt.Errorf("%w: line %d: key id must be printable ASCII", ErrKeysFile, lineNo)
		}
		k := NewKey(id, key, admin)
		if prev, dup := ids[id]; dup {
			return nil, fmt.Errorf("%w: line %d: key id %q already used on line %d", ErrKeysFile, lineNo, id, prev)
		}
		if prev, dup := hashes[k.hash]; dup {
			return nil, fmt.Errorf("%w: line %d: same key as line %d", ErrKeysFile, lineNo, prev)
		}
		ids[id], hashes[k.hash] = lineNo, lineNo
		keys = append(keys, k)
	}
	return keys, nil
}

func printableID(s string) bool {
	if len(s) > 128 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x21 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// Lookup finds the key whose hash matches token's. It compares against every key in constant time per
// key, so the time taken says nothing about which key (if any) matched or how much of it.
func Lookup(keys []Key, token string) (Key, bool) {
	h := sha256.Sum256([]byte(token))
	var found Key
	ok := 0
	for i := range keys {
		if subtle.ConstantTimeCompare(h[:], keys[i].hash[:]) == 1 {
			found = keys[i]
			ok = 1
		}
	}
	return found, ok == 1
}

// keyFile is the --api-keys-file, re-read when its bytes change (at most once per check interval,
// on the request path: there is no goroutine to own).
type keyFile struct {
	path     string
	interval time.Duration
	now      func() time.Time
	logger   *slog.Logger
	onReload func(err error)

	keys      atomic.Pointer[[]Key]
	nextCheck atomic.Int64

	mu      sync.Mutex // serialises reloads
	data    []byte     // bytes keys were parsed from, under mu
	badData []byte     // last content that failed to parse (logged once), under mu
}

func loadKeyFile(path string, interval time.Duration, now func() time.Time, logger *slog.Logger, onReload func(error)) (*keyFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrKeysFile, err)
	}
	keys, err := ParseKeys(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	f := &keyFile{path: path, interval: interval, now: now, logger: logger, onReload: onReload, data: data}
	f.keys.Store(&keys)
	f.nextCheck.Store(now().Add(interval).UnixNano())
	logger.Info("api keys loaded", "file", path, "keys", len(keys))
	return f, nil
}

// current returns the keys, re-reading the file first when the check interval has passed.
func (f *keyFile) current() []Key {
	now := f.now().UnixNano()
	next := f.nextCheck.Load()
	if now >= next && f.nextCheck.CompareAndSwap(next, f.now().Add(f.interval).UnixNano()) {
		f.reload()
	}
	return *f.keys.Load()
}

// reload swaps in the file's keys when its bytes changed and parse; a missing or broken file keeps the
// keys in service (an operator's half-written edit must not lock every client out) and is logged once.
func (f *keyFile) reload() {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := os.ReadFile(f.path)
	if err != nil {
		if f.badData == nil || len(f.badData) != 0 {
			f.badData = []byte{}
			f.logger.Warn("api keys file unreadable; keeping the loaded keys", "file", f.path, "err", err)
			f.report(err)
		}
		return
	}
	if bytes.Equal(data, f.data) {
		return
	}
	keys, err := ParseKeys(data)
	if err != nil {
		if !bytes.Equal(data, f.badData) {
			f.badData = data
			f.logger.Warn("api keys file changed but does not parse; keeping the loaded keys", "file", f.path, "err", err)
			f.report(err)
		}
		return
	}
	f.data, f.badData = data, nil
	f.keys.Store(&keys)
	f.logger.Info("api keys reloaded", "file", f.path, "keys", len(keys))
	f.report(nil)
}

func (f *keyFile) report(err error) {
	if f.onReload != nil {
		f.onReload(err)
	}
}
