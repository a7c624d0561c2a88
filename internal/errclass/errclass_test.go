package errclass

import (
	"errors"
	"fmt"
	"io"
	"testing"
)

func TestOf(t *testing.T) {
	sentinel := New(NotFound, "no such thing")
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"nil", nil, nil},
		{"unclassed", io.EOF, nil},
		{"sentinel", sentinel, NotFound},
		{"wrapped sentinel", fmt.Errorf("code %q: %w", "x", sentinel), NotFound},
		{"wrap", Wrap(Busy, io.ErrUnexpectedEOF), Busy},
		{"joined: the most specific", errors.Join(New(Invalid, "a"), New(Gone, "b")), Gone},
	} {
		if got := Of(tt.err); got != tt.want {
			t.Errorf("%s: Of = %v, want %v", tt.name, got, tt.want)
		}
	}
	if !errors.Is(fmt.Errorf("x: %w", sentinel), sentinel) {
		t.Error("a sentinel is not itself through a wrap")
	}
	w := Wrap(Unavailable, io.ErrUnexpectedEOF)
	if w.Error() != io.ErrUnexpectedEOF.Error() || !errors.Is(w, io.ErrUnexpectedEOF) || errors.Is(w, Busy) {
		t.Errorf("Wrap changed the error: %v", w)
	}
	if Wrap(Busy, nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
	if errors.Is(sentinel, Invalid) {
		t.Error("a NotFound sentinel matched Invalid")
	}
}
