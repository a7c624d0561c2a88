package executor

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode/utf8"
)

// checkOutput returns nil when text, the OUTPUT the executor received over the control line,
// is one JSON value in valid UTF-8 whose objects never hold a name twice; else an error
// saying what is wrong. The bootstrap refuses such an OUTPUT itself (naming the Python keys);
// this holds a program that writes the control line itself to the same rules.
func checkOutput(text []byte) error {
	if !utf8.Valid(text) {
		return errors.New("it is not valid UTF-8")
	}
	var raw json.RawMessage
	if err := json.Unmarshal(text, &raw); err != nil {
		return fmt.Errorf("it is not JSON: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.UseNumber()
	// names[i] holds the names seen so far in the i-th enclosing object; nil for an array.
	var names []map[string]bool
	expectName := func() bool { return len(names) > 0 && names[len(names)-1] != nil }
	for {
		// In an object, a string token where a name may stand is a name.
		nameNext := expectName() && dec.More()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("it is not JSON: %v", err)
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				names = append(names, map[string]bool{})
			case '[':
				names = append(names, nil)
			default:
				names = names[:len(names)-1]
			}
			continue
		case string:
			if nameNext {
				seen := names[len(names)-1]
				if seen[t] {
					return fmt.Errorf("an object holds the name %q twice", t)
				}
				seen[t] = true
				// The value that follows is read by the next Token call; it is not a name.
				if err := skipValue(dec, &names); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// skipValue reads one value after an object's name: a scalar is consumed, an object or array
// is opened (pushed on names) for the caller's loop to walk.
func skipValue(dec *json.Decoder, names *[]map[string]bool) error {
	tok, err := dec.Token()
	if err != nil {
		return fmt.Errorf("it is not JSON: %v", err)
	}
	switch tok {
	case json.Delim('{'):
		*names = append(*names, map[string]bool{})
	case json.Delim('['):
		*names = append(*names, nil)
	}
	return nil
}
