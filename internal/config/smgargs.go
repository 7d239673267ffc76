package config

import (
	"errors"
	"fmt"
	"strings"
)

// smgArgs rewrites SMG's command-line forms into ones the flag package reads and reports SMG flags
// sluice refuses (each on its own line) and unknown flags, before anything is parsed:
//
//   - a flag taking several values (`--worker-urls http://a http://b`) becomes one flag per value;
//     given no value at all, it is dropped (an empty list, as in SMG);
//   - a refused flag is reported with its reason, its values skipped;
//   - a flag neither sluice nor SMG has is an error naming it (not the flag package's generic one).
//
// Like the flag package it stops at "--" or at the first argument that is not a flag.
func (s *flagSet) smgArgs(args []string) ([]string, error) {
	out := make([]string, 0, len(args))
	var refused []error // refused and unknown flags, one line each
	for i := 0; i < len(args); i++ {
		arg := args[i]
		if arg == "--" || len(arg) < 2 || arg[0] != '-' {
			out = append(out, args[i:]...)
			break
		}
		name, value, hasValue := strings.Cut(strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-"), "=")
		if name == "h" || name == "help" {
			out = append(out, arg)
			continue
		}
		if r, ok := smgRefused[name]; ok {
			refused = append(refused, fmt.Errorf("--%s is not supported: %s", name, r.reason))
			i = s.skipValues(args, i, r.kind, hasValue)
			continue
		}
		f := s.fs.Lookup(name)
		if f == nil {
			hint := "see sluice serve --help and docs/migrating-from-smg.md"
			if near := suggestFlag(s.fs, name); near != "" {
				hint = "did you mean --" + near + "? (" + hint + ")"
			}
			refused = append(refused, fmt.Errorf("unknown flag --%s: neither a sluice flag nor a Rust gateway (SMG) flag; %s", name, hint))
			continue
		}
		switch {
		case smgMulti[name]:
			if hasValue {
				out = append(out, "--"+name+"="+value)
				continue
			}
			for i+1 < len(args) && !s.isFlagArg(args[i+1]) {
				i++
				out = append(out, "--"+name+"="+args[i])
			}
		case name == "prefill":
			out = append(out, arg)
			if !hasValue && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
			if i+1 < len(args) && isBootstrapPortToken(args[i+1]) {
				i++
				out = append(out, args[i])
			}
		default:
			out = append(out, arg)
			if !hasValue && !isBoolFlag(f) && i+1 < len(args) {
				i++
				out = append(out, args[i])
			}
		}
	}
	if len(refused) > 0 {
		return nil, errors.Join(refused...)
	}
	return out, nil
}

// isFlagArg reports an argument that starts the next flag, and so ends the values of a flag taking
// several: "--anything", or "-name" when name is a flag. Anything else (a negative number, a label
// selector "-app=x" that is no flag) is a value.
func (s *flagSet) isFlagArg(a string) bool {
	if len(a) < 2 || a[0] != '-' || a == "--" {
		return a == "--"
	}
	if strings.HasPrefix(a, "--") {
		return true
	}
	name, _, _ := strings.Cut(a[1:], "=")
	_, refused := smgRefused[name]
	return refused || s.fs.Lookup(name) != nil || name == "h" || name == "help"
}

// skipValues returns the index of the last argument that belongs to the refused flag at args[i].
func (s *flagSet) skipValues(args []string, i int, kind argKind, hasValue bool) int {
	switch kind {
	case argBool:
	case argOne:
		if !hasValue && i+1 < len(args) {
			i++
		}
	case argMulti:
		if !hasValue {
			for i+1 < len(args) && !s.isFlagArg(args[i+1]) {
				i++
			}
		}
	case argURLPort:
		if !hasValue && i+1 < len(args) {
			i++
		}
		if i+1 < len(args) && isBootstrapPortToken(args[i+1]) {
			i++
		}
	}
	return i
}
