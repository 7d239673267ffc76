// Package fielderr is the one spelling of a settings error across the tree. A core package owns its
// Settings and their one Validate (connect-go's habit); Validate reports each invalid field as an
// [*Error] whose rule and wording live in that package once. Every surface that reads those settings
// its own way (command-line flags, an admin RPC's fields) names the field its way with [Error.Named]
// and reports nothing of its own.
package fielderr

import (
	"errors"
	"fmt"
)

// Error is one invalid field. Field is the field's Go name ("QueueSize", "Tenants.Burst"), the key
// a surface maps to its own name; Problem says what is wrong in words that follow the field's name
// ("must be at least 0, got -1").
type Error struct {
	// Pkg and Name are how the owning package itself names the field ("admission", "queue size").
	Pkg, Name string
	Field     string
	Problem   string
}

func (e *Error) Error() string { return e.Pkg + ": " + e.Named(e.Name) }

// Named is the error with the field called name.
func (e *Error) Named(name string) string { return name + " " + e.Problem }

// List collects one Validate's field errors. Its zero value is not usable: make one with [New].
type List struct {
	pkg   string
	names map[string]string
	errs  []error
}

// New starts a list for package pkg, whose fields are named in words by names (Go name → words).
func New(pkg string, names map[string]string) *List { return &List{pkg: pkg, names: names} }

// Add reports field as invalid.
func (l *List) Add(field, format string, a ...any) {
	name := l.names[field]
	if name == "" {
		name = field
	}
	l.errs = append(l.errs, &Error{Pkg: l.pkg, Name: name, Field: field, Problem: fmt.Sprintf(format, a...)})
}

// Err is every reported field (errors.Join), or nil.
func (l *List) Err() error { return errors.Join(l.errs...) }

// All returns the field errors inside err (one Validate's, or several joined), in order; errors
// that are not field errors are returned in other.
func All(err error) (fields []*Error, other []error) {
	if err == nil {
		return nil, nil
	}
	var walk func(error)
	walk = func(e error) {
		if e == nil {
			return
		}
		if fe, ok := e.(*Error); ok { //nolint:errorlint // each node of the tree is classified itself; errors.As would reach past a wrapper
			fields = append(fields, fe)
			return
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				walk(x)
			}
			return
		}
		if _, ok := errors.AsType[*Error](e); ok {
			walk(errors.Unwrap(e)) // a wrapper around field errors: its own words add nothing
			return
		}
		other = append(other, e)
	}
	walk(err)
	return fields, other
}
