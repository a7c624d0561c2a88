package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/suggest"
)

// shape describes the JSON object a request body must hold.
type shape struct {
	fields  []string          // every field it may have
	expect  map[string]string // what a field must be, for type errors ("must be a string")
	example string            // a minimal valid body
}

// mediaType returns the request's media type ("" without a Content-Type), or a 415 error
// saying how to send it (hint) when it is not one of accepted. Only these are taken: a web page
// can send text/plain or a form without asking first, but not JSON.
func mediaType(r *http.Request, hint string, accepted ...string) (string, error) {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		return "", nil
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && slices.Contains(accepted, mt) {
		return mt, nil
	}
	return "", &requestError{status: http.StatusUnsupportedMediaType, code: apitype.CodeUnsupportedMedia,
		msg: fmt.Sprintf("Content-Type %q is not accepted; %s", ct, hint)}
}

// readBody checks a JSON request's Content-Type, refuses a body over limit bytes (before
// reading it when Content-Length says so) and decodes it into v by sh (see decodeBody).
// Errors are answered by writeError.
func readBody(w http.ResponseWriter, r *http.Request, limit int64, v any, sh shape) error {
	if r.ContentLength > limit {
		// Answer before reading anything; the server closes the connection afterwards.
		w.Header().Set("Connection", "close")
		return &requestError{status: http.StatusRequestEntityTooLarge, code: apitype.CodeTooLarge,
			msg: fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", r.ContentLength, limit)}
	}
	if _, err := mediaType(r, "send the body as JSON with Content-Type: application/json", "application/json"); err != nil {
		return err
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	return decodeBody(r.Body, v, sh)
}

// decodeBody reads body, which must hold exactly one JSON object with no field unknown to
// sh, repeated or in other letter case, into v. Its errors are *requestError or
// *http.MaxBytesError.
func decodeBody(body io.Reader, v any, sh shape) error {
	dec := json.NewDecoder(body)
	var raw json.RawMessage
	if err := dec.Decode(&raw); err != nil {
		return bodyError(err, sh)
	}
	// Anything but white space after the object is an error (and may be the body's excess).
	if _, err := dec.Token(); err != io.EOF {
		if err == nil {
			err = errors.New("more JSON follows it")
		}
		var maxErr *http.MaxBytesError
		if errors.As(err, &maxErr) {
			return maxErr
		}
		return invalid("", "the request body must hold exactly one JSON object, but data follows the object (%v)", err)
	}
	if !utf8.Valid(raw) {
		return invalid("", "the request body is not valid UTF-8; JSON text must be UTF-8")
	}
	if raw[0] != '{' {
		return invalid("", "the request body must be a JSON object such as %s, not %s", sh.example, jsonKind(raw[0]))
	}

	if err := checkKeys(raw, sh); err != nil {
		return err
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return bodyError(err, sh)
	}
	return nil
}

// checkDepth refuses JSON text nested deeper than sandbox.MaxInputDepth levels below its
// outer levels (1 for an object that holds the values): clients such as Python's JSON reader
// fail near 1000 levels, so a value stored with more would break whoever reads it back (an
// execution's input has the same rule, checked with its field's name).
func checkDepth(text []byte, outer int) error {
	if d := sandbox.JSONDepth(text) - outer; d > sandbox.MaxInputDepth {
		return invalid("", "the JSON nests %d levels deep; the limit is %d levels (JSON readers such as Python's stop near 1000)",
			d, sandbox.MaxInputDepth)
	}
	return nil
}

// checkKeys refuses what encoding/json lets through: a key given twice (it keeps the last) and
// a key in other letter case (it matches "Code" to code).
func checkKeys(object json.RawMessage, sh shape) error {
	dec := json.NewDecoder(bytes.NewReader(object))
	if _, err := dec.Token(); err != nil { // {
		return bodyError(err, sh)
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return bodyError(err, sh)
		}
		key, _ := tok.(string)
		if seen[key] {
			return invalid(key, "field %q is given twice; give each field once", key)
		}
		seen[key] = true
		if !slices.Contains(sh.fields, key) {
			return bodyError(fmt.Errorf("json: unknown field %q", key), sh)
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return bodyError(err, sh)
		}
	}
	return nil
}

// bodyError turns a JSON decoding error into the request error to answer.
func bodyError(err error, sh shape) error {
	var (
		maxErr    *http.MaxBytesError
		syntaxErr *json.SyntaxError
		typeErr   *json.UnmarshalTypeError
	)
	switch {
	case errors.As(err, &maxErr):
		return maxErr
	case err == io.EOF:
		return invalid("", "the request body is empty; it must be a JSON object such as %s", sh.example)
	case err == io.ErrUnexpectedEOF:
		return invalid("", "the request body ends in the middle of its JSON; it must be a complete JSON object such as %s", sh.example)
	case errors.As(err, &syntaxErr):
		return invalid("", "the request body is not valid JSON (%v at byte %d); it must be a JSON object such as %s",
			syntaxErr, syntaxErr.Offset, sh.example)
	case errors.As(err, &typeErr):
		// encoding/json names a field of an embedded struct with the struct's Go name
		// ("Draft.description"): the client knows only the JSON key.
		if i := strings.LastIndexByte(typeErr.Field, '.'); i >= 0 {
			typeErr.Field = typeErr.Field[i+1:]
		}
		if typeErr.Field == "" {
			return invalid("", "the request body must be a JSON object such as %s, not %s", sh.example, typeErr.Value)
		}
		want := sh.expect[typeErr.Field]
		if want == "" {
			want = "has the wrong type"
		}
		return invalid(typeErr.Field, "%s: %s, not %s", typeErr.Field, want, typeErr.Value)
	}
	if name, ok := unknownField(err); ok {
		msg := fmt.Sprintf("unknown field %q", name)
		if len(sh.fields) == 0 {
			return invalid(name, "%s; this request takes no fields: send no body, or %s", msg, sh.example)
		}
		if near := suggest.Nearest(name, sh.fields, 2); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		return invalid(name, "%s; known fields are %s", msg, strings.Join(sh.fields, ", "))
	}
	return invalid("", "the request body could not be decoded (%v); it must be a JSON object such as %s", err, sh.example)
}

func invalid(field, format string, args ...any) *requestError {
	return &requestError{status: http.StatusBadRequest, code: apitype.CodeInvalidRequest, field: field,
		msg: fmt.Sprintf(format, args...)}
}

// unknownField extracts the name from encoding/json's DisallowUnknownFields error, which has no
// type of its own: `json: unknown field "name"`.
func unknownField(err error) (string, bool) {
	const prefix = "json: unknown field "
	msg := err.Error()
	if !strings.HasPrefix(msg, prefix) {
		return "", false
	}
	name, uerr := strconv.Unquote(strings.TrimPrefix(msg, prefix))
	if uerr != nil {
		return "", false
	}
	return name, true
}

// jsonKind names the kind of JSON value that starts with c.
func jsonKind(c byte) string {
	switch c {
	case '[':
		return "an array"
	case '"':
		return "a string"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// jsonWords restates an error of encoding/json in the words of the JSON sent: the field and
// the kinds of value, never Go's ("Go struct field Memory.text of type string").
func jsonWords(err error) error {
	var (
		typeErr   *json.UnmarshalTypeError
		syntaxErr *json.SyntaxError
	)
	switch {
	case err == nil:
		return nil
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if i := strings.LastIndexByte(field, '.'); i >= 0 {
			field = field[i+1:]
		}
		if field == "" {
			return fmt.Errorf("must be %s, not %s", kindOfType(typeErr.Type), typeErr.Value)
		}
		return fmt.Errorf("field %q must be %s, not %s", field, kindOfType(typeErr.Type), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return fmt.Errorf("not valid JSON (%v at byte %d)", syntaxErr, syntaxErr.Offset)
	}
	if name, ok := unknownField(err); ok {
		return fmt.Errorf("unknown field %q", name)
	}
	return err
}

// kindOfType names the JSON value a Go type is decoded from.
func kindOfType(t reflect.Type) string {
	if t == nil {
		return "another kind of value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "an array"
	default:
		return "an object"
	}
}
