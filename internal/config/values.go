package config

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/sluicegw/sluice/internal/admission"
)

// durationValue is a flag holding a time.Duration written as a (possibly
// fractional) number of units, e.g. seconds for the *-secs flags.
type durationValue struct {
	p    *time.Duration
	unit time.Duration
}

func (v durationValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatFloat(float64(*v.p)/float64(v.unit), 'f', -1, 64)
}

// Get returns the duration, for the startup summary.
func (v durationValue) Get() any { return *v.p }

func (v durationValue) Set(s string) error {
	f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil {
		return errors.New("not a number")
	}
	ns := f * float64(v.unit)
	// Range is checked here because converting an out-of-range float to an
	// integer silently yields garbage; the sign is checked by Validate.
	if math.IsNaN(ns) || math.Abs(ns) >= math.MaxInt64 {
		return errors.New("out of range")
	}
	*v.p = time.Duration(math.Round(ns))
	return nil
}

// sizeValue is a flag holding a byte count with an optional unit suffix.
type sizeValue struct{ p *int64 }

func (v sizeValue) String() string {
	if v.p == nil {
		return ""
	}
	return strconv.FormatInt(*v.p, 10)
}

// Get returns the byte count, for the startup summary.
func (v sizeValue) Get() any { return *v.p }

func (v sizeValue) Set(s string) error {
	n, err := ParseSize(s)
	if err != nil {
		return err
	}
	*v.p = n
	return nil
}

var sizeRe = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)$`)

func sizeUnit(suffix string) (float64, bool) {
	switch strings.ToLower(suffix) {
	case "", "b":
		return 1, true
	case "kb":
		return 1e3, true
	case "mb":
		return 1e6, true
	case "gb":
		return 1e9, true
	case "tb":
		return 1e12, true
	case "kib":
		return 1 << 10, true
	case "mib":
		return 1 << 20, true
	case "gib":
		return 1 << 30, true
	case "tib":
		return 1 << 40, true
	}
	return 0, false
}

// ParseSize parses a byte count such as "536870912", "512MiB", "1GB" or
// "10KB". KB/MB/GB/TB are powers of 1000 and KiB/MiB/GiB/TiB powers of 1024,
// case-insensitively; a bare number is bytes. Fractions round down.
func ParseSize(s string) (int64, error) {
	m := sizeRe.FindStringSubmatch(strings.TrimSpace(s))
	if m == nil {
		return 0, fmt.Errorf("invalid size %q: want a number of bytes with an optional unit (B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s)
	}
	mult, ok := sizeUnit(m[2])
	if !ok {
		return 0, fmt.Errorf("invalid size %q: unknown unit %q (want B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)", s, m[2])
	}
	if !strings.Contains(m[1], ".") {
		// Integers avoid float rounding for exact byte counts.
		n, err := strconv.ParseInt(m[1], 10, 64)
		if err == nil && (mult == 1 || n <= math.MaxInt64/int64(mult)) {
			return n * int64(mult), nil
		}
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0, fmt.Errorf("invalid size %q", s)
	}
	b := math.Floor(f * mult)
	if b >= math.MaxInt64 {
		return 0, fmt.Errorf("invalid size %q: too large", s)
	}
	return int64(b), nil
}

// secretValue is a flag holding a [Secret].
type secretValue struct{ p *Secret }

func (v secretValue) String() string {
	if v.p == nil {
		return ""
	}
	return v.p.String()
}

func (v secretValue) Set(s string) error { *v.p = Secret(s); return nil }

// Get returns the Secret itself, which logs as "[redacted]".
func (v secretValue) Get() any { return *v.p }

// logLevelValue is a flag holding one of the four slog levels by name.
type logLevelValue struct{ p *slog.Level }

// newLogLevel binds a log level flag to p, with its default.
func newLogLevel(p *slog.Level, def slog.Level) logLevelValue {
	*p = def
	return logLevelValue{p}
}

func parseLogLevel(s string) (slog.Level, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, true
	case "info":
		return slog.LevelInfo, true
	case "warn":
		return slog.LevelWarn, true
	case "error":
		return slog.LevelError, true
	}
	return 0, false
}

func logLevelName(l slog.Level) (string, bool) {
	switch l {
	case slog.LevelDebug:
		return "debug", true
	case slog.LevelInfo:
		return "info", true
	case slog.LevelWarn:
		return "warn", true
	case slog.LevelError:
		return "error", true
	}
	return "", false
}

func (v logLevelValue) String() string {
	if v.p == nil {
		return ""
	}
	if name, ok := logLevelName(*v.p); ok {
		return name
	}
	return v.p.String()
}

func (v logLevelValue) Set(s string) error {
	l, ok := parseLogLevel(s)
	if !ok {
		return errors.New("must be one of debug, info, warn, error")
	}
	*v.p = l
	return nil
}

// urlListValue is the repeatable --worker-urls flag; each value may hold
// several URLs separated by commas or spaces.
type urlListValue struct{ p *[]string }

func (v urlListValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v urlListValue) Set(s string) error {
	*v.p = append(*v.p, strings.FieldsFunc(s, func(r rune) bool { return r == ',' || unicode.IsSpace(r) })...)
	return nil
}

// prefillEntry is one --prefill value before the runtime is known.
type prefillEntry struct {
	url           string
	bootstrapPort int
}

// prefillListValue is the repeatable --prefill flag. One value is "URL" or
// "URL PORT"; Parse's pre-processing joins the separate PORT argument.
type prefillListValue struct{ p *[]prefillEntry }

func (v prefillListValue) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, 0, len(*v.p))
	for _, e := range *v.p {
		if e.bootstrapPort != 0 {
			parts = append(parts, e.url+" "+strconv.Itoa(e.bootstrapPort))
		} else {
			parts = append(parts, e.url)
		}
	}
	return strings.Join(parts, ",")
}

func (v prefillListValue) Set(s string) error {
	fields := strings.Fields(s)
	switch len(fields) {
	case 1:
		*v.p = append(*v.p, prefillEntry{url: fields[0]})
		return nil
	case 2:
		port, err := parseBootstrapPort(fields[1])
		if err != nil {
			return err
		}
		*v.p = append(*v.p, prefillEntry{url: fields[0], bootstrapPort: port})
		return nil
	default:
		return fmt.Errorf("want URL [BOOTSTRAP_PORT], got %q", s)
	}
}

// isBootstrapPortToken reports whether an argument following --prefill URL is
// meant as its bootstrap port (digits or "none").
func isBootstrapPortToken(s string) bool {
	if strings.EqualFold(s, "none") {
		return true
	}
	if s == "" {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}

func parseBootstrapPort(s string) (int, error) {
	if strings.EqualFold(s, "none") {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > 65535 {
		return 0, fmt.Errorf("bootstrap port %q: want a port number 1-65535 or \"none\"", s)
	}
	return n, nil
}

// stringListValue is the repeatable --decode flag: one URL per value.
type stringListValue struct{ p *[]string }

func (v stringListValue) String() string {
	if v.p == nil {
		return ""
	}
	return strings.Join(*v.p, ",")
}

func (v stringListValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" || strings.ContainsFunc(s, unicode.IsSpace) {
		return fmt.Errorf("want one URL, got %q", s)
	}
	*v.p = append(*v.p, s)
	return nil
}

// redactURL hides a password in a URL for logs and messages. Other input is
// returned as given (not re-encoded), unless it fails to parse and might hold
// credentials.
func redactURL(s string) string {
	u, err := url.Parse(s)
	switch {
	case err != nil && strings.Contains(s, "@"):
		return redacted
	case err != nil || u.User == nil:
		return s
	}
	if _, has := u.User.Password(); !has {
		return s
	}
	return u.Redacted()
}

// bandsValue is --prefill-priority-bands: NAME:MIN pairs separated by commas,
// lowest band first; empty clears the bands.
type bandsValue struct{ p *[]admission.Band }

func (v bandsValue) String() string {
	if v.p == nil {
		return ""
	}
	parts := make([]string, len(*v.p))
	for i, b := range *v.p {
		parts[i] = b.Name + ":" + strconv.Itoa(b.MinPriority)
	}
	return strings.Join(parts, ",")
}

func (v bandsValue) Set(s string) error {
	bands, err := ParsePriorityBands(s)
	if err != nil {
		return err
	}
	*v.p = bands
	return nil
}

// ParsePriorityBands parses NAME:MIN,NAME:MIN,... (lowest band first; empty
// means no bands). Order and names are checked by Validate.
func ParsePriorityBands(s string) ([]admission.Band, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []admission.Band
	for _, part := range strings.Split(s, ",") {
		name, minStr, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(strings.TrimSpace(minStr))
		if !ok || err != nil || strings.TrimSpace(name) == "" {
			return nil, fmt.Errorf("band %q: want NAME:MIN_PRIORITY, e.g. high:10", part)
		}
		out = append(out, admission.Band{Name: strings.TrimSpace(name), MinPriority: n})
	}
	return out, nil
}

// rangeValue is --prefill-adaptive-limit: MIN:MAX; empty clears it.
type rangeValue struct{ lo, hi *int }

func (v rangeValue) String() string {
	if v.lo == nil || (*v.lo == 0 && *v.hi == 0) {
		return ""
	}
	return strconv.Itoa(*v.lo) + ":" + strconv.Itoa(*v.hi)
}

func (v rangeValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if s == "" {
		*v.lo, *v.hi = 0, 0
		return nil
	}
	a, b, ok := strings.Cut(s, ":")
	lo, err1 := strconv.Atoi(strings.TrimSpace(a))
	hi, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil {
		return errors.New("want MIN:MAX, e.g. 2:32")
	}
	*v.lo, *v.hi = lo, hi
	return nil
}

// decodeLimitValue is --decode-max-inflight-requests-per-worker: a number
// (<= 0 off) or "auto".
type decodeLimitValue struct {
	n    *int
	auto *bool
}

func (v decodeLimitValue) String() string {
	if v.n == nil {
		return ""
	}
	if *v.auto {
		return "auto"
	}
	return strconv.Itoa(*v.n)
}

func (v decodeLimitValue) Set(s string) error {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "auto") {
		*v.n, *v.auto = -1, true
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return errors.New(`want a number of requests or "auto"`)
	}
	*v.n, *v.auto = n, false
	return nil
}
