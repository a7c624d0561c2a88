package executor

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// checkOutput returns nil when text, the OUTPUT the executor received over the control line,
// is one JSON value in valid UTF-8 whose objects never hold a name twice; else an error
// saying what is wrong. The bootstrap refuses such an OUTPUT itself (naming the Python keys);
// this holds a program that writes the control line itself to the same rules.
func checkOutput(text []byte) error {
	if !utf8.Valid(text) {
		return errors.New("it is not valid UTF-8")
	}
	if !json.Valid(text) {
		var v json.RawMessage
		return fmt.Errorf("it is not JSON: %v", json.Unmarshal(text, &v))
	}
	if d := sandbox.JSONDepth(text); d > sandbox.MaxInputDepth {
		return fmt.Errorf("it nests %d levels deep; the limit is %d levels (JSON readers such as Python's stop near 1000)", d, sandbox.MaxInputDepth)
	}
	return checkNames(text)
}

// checkNames returns an error naming the first name that an object of text, valid JSON,
// holds twice (names compared after their escapes are decoded).
func checkNames(text []byte) error {
	var stack []*nameSet // nil entries for arrays
	for i := 0; i < len(text); i++ {
		switch text[i] {
		case '{':
			stack = append(stack, &nameSet{expectName: true})
		case '[':
			stack = append(stack, nil)
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			if top := stack[len(stack)-1]; top != nil {
				top.expectName = true
			}
		case '"':
			end := i + 1
			escaped := false
			for ; text[end] != '"'; end++ {
				if text[end] == '\\' {
					escaped = true
					end++
				}
			}
			if len(stack) > 0 && stack[len(stack)-1] != nil && stack[len(stack)-1].expectName {
				name := string(text[i+1 : end])
				if escaped {
					if err := json.Unmarshal(text[i:end+1], &name); err != nil {
						return fmt.Errorf("it is not JSON: %v", err)
					}
				}
				if !stack[len(stack)-1].add(name) {
					return fmt.Errorf("an object holds the name %q twice", name)
				}
			}
			i = end
		}
	}
	return nil
}

// nameSet is the names of one object seen so far: a list while short, a map past that.
type nameSet struct {
	list       []string
	set        map[string]bool
	expectName bool // the next string is a name
}

// add adds name and reports whether it was new.
func (s *nameSet) add(name string) bool {
	s.expectName = false
	if s.set == nil {
		if slices.Contains(s.list, name) {
			return false
		}
		if s.list = append(s.list, name); len(s.list) > 16 {
			s.set = map[string]bool{}
			for _, n := range s.list {
				s.set[n] = true
			}
			s.list = nil
		}
		return true
	}
	if s.set[name] {
		return false
	}
	s.set[name] = true
	return true
}
