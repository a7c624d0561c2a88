// Package errclass is the small set of classes that sandpit's errors fall into, matched with
// errors.Is: errors.Is(err, errclass.NotFound). The domain's errors (sandbox, store, library,
// datadir) say which class they are; the transports map a class to their own terms in one
// place each: httpapi to an HTTP status and error code, the client from the code back to a
// class, the CLI to an exit status. containerd's errdefs is the model.
//
// It imports only the standard library, so that every package, the client among them, may
// use it.
package errclass

import (
	"errors"
	"fmt"
)

// class is an error class. Its text is the class's name; a class is never returned alone, but
// matched through an error that is of it (New, Wrap, or an Is method).
type class string

func (c class) Error() string { return string(c) }

// The classes, and what the request's sender can do about each.
var (
	// Invalid: the request is malformed or a value is out of range; fix it.
	Invalid error = class("invalid")
	// NotFound: what the request names does not exist.
	NotFound error = class("not found")
	// Conflict: it exists already, changed meanwhile, or is in use.
	Conflict error = class("conflict")
	// Gone: it existed, but its data is no longer kept.
	Gone error = class("gone")
	// TooLarge: a body, a value or what an agent stores is over its limit; send less.
	TooLarge error = class("too large")
	// Busy: every slot and queue place is taken, or the resource is held by another
	// process; try again later.
	Busy error = class("busy")
	// Unavailable: the service cannot do it now (starting, recovering, not set up); try again
	// once it is ready.
	Unavailable error = class("unavailable")
	// Forbidden: the sender may not do this (no or a wrong token, a refused origin).
	Forbidden error = class("forbidden")
)

// Classes lists every class, most specific first: Of answers the first that an error
// matches.
var Classes = []error{Gone, NotFound, Conflict, TooLarge, Busy, Unavailable, Forbidden, Invalid}

// Of returns the class err is of (one of Classes, compared with ==), or nil when it is of
// none: an internal failure.
func Of(err error) error {
	if err == nil {
		return nil
	}
	for _, c := range Classes {
		if errors.Is(err, c) {
			return c
		}
	}
	return nil
}

// New returns an error of class c whose text is msg, for a package's sentinel errors:
//
//	var ErrNotFound = errclass.New(errclass.NotFound, "not found")
//
// errors.Is matches it both as itself and as c.
func New(c error, msg string) error {
	return &classed{msg: msg, class: c}
}

// Newf is New with a formatted text; the arguments are not wrapped.
func Newf(c error, format string, args ...any) error {
	return &classed{msg: fmt.Sprintf(format, args...), class: c}
}

// Wrap returns err, unchanged in text and in what errors.Is and errors.As find, that is also
// of class c; nil when err is nil.
func Wrap(c, err error) error {
	if err == nil {
		return nil
	}
	return &wrapped{err: err, class: c}
}

type classed struct {
	msg   string
	class error
}

func (e *classed) Error() string        { return e.msg }
func (e *classed) Is(target error) bool { return target == e.class }

type wrapped struct {
	err   error
	class error
}

func (e *wrapped) Error() string        { return e.err.Error() }
func (e *wrapped) Unwrap() error        { return e.err }
func (e *wrapped) Is(target error) bool { return target == e.class }
