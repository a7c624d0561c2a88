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
	// flat says that no nested object of the target has fields of its own: checkKeys is the
	// whole check of field names, and the body is decoded with json.Unmarshal, without the
	// strict decoder's copy of it.
	flat    bool
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
	body, err := readBodyBytes(w, r, limit, sh)
	if err != nil {
		return err
	}
	return decodeBody(body, v, sh)
}

// readBodyBytes is readBody without the decoding: it returns the body's bytes.
func readBodyBytes(w http.ResponseWriter, r *http.Request, limit int64, sh shape) ([]byte, error) {
	if r.ContentLength > limit {
		// Answer before reading anything; the server closes the connection afterwards.
		w.Header().Set("Connection", "close")
		return nil, &requestError{status: http.StatusRequestEntityTooLarge, code: apitype.CodeTooLarge,
			msg: fmt.Sprintf("the request body is %d bytes; the limit is %d bytes", r.ContentLength, limit)}
	}
	if _, err := mediaType(r, "send the body as JSON with Content-Type: application/json", "application/json"); err != nil {
		return nil, err
	}
	body, err := readAll(http.MaxBytesReader(w, r.Body, limit), r.ContentLength)
	if err != nil {
		return nil, bodyError(err, sh)
	}
	return body, nil
}

// readAll reads r to its end into one buffer of size bytes when size (a Content-Length) is
// known: the body is held once, not in a buffer grown by doubling.
func readAll(r io.Reader, size int64) ([]byte, error) {
	if size < 0 {
		return io.ReadAll(r)
	}
	buf := make([]byte, size)
	n, err := io.ReadFull(r, buf)
	if err == io.ErrUnexpectedEOF {
		err = nil // the server ends the body at Content-Length; shorter is cut by the client
	}
	if err == nil {
		// More than Content-Length cannot arrive; MaxBytesReader's error still can.
		_, err = r.Read(make([]byte, 1))
		if err == io.EOF {
			err = nil
		}
	}
	return buf[:n], err
}

// decodeBody decodes body, which must hold exactly one JSON object with no field unknown to
// sh, repeated or in other letter case, into v. Its errors are *requestError or
// *http.MaxBytesError. While it decodes, the body is held at most twice (itself and the strict
// decoder's buffer; once with sh.flat) beside the values decoded.
func decodeBody(body []byte, v any, sh shape) error {
	raw := bytes.TrimSpace(body)
	if !json.Valid(raw) {
		return syntaxProblem(raw, sh)
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
	if sh.flat {
		if err := json.Unmarshal(raw, v); err != nil {
			return bodyError(err, sh)
		}
		return nil
	}
	strict := json.NewDecoder(bytes.NewReader(raw))
	strict.DisallowUnknownFields()
	if err := strict.Decode(v); err != nil {
		return bodyError(err, sh)
	}
	return nil
}

// syntaxProblem says what is wrong with raw, which is not one valid JSON value.
func syntaxProblem(raw []byte, sh shape) error {
	if len(raw) == 0 {
		return bodyError(io.EOF, sh)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if err := dec.Decode(&struct{}{}); err != nil {
		var typeErr *json.UnmarshalTypeError
		if !errors.As(err, &typeErr) {
			return bodyError(err, sh)
		}
	}
	// One value decoded: anything but white space after it is the error.
	_, err := dec.Token()
	if err == nil {
		err = errors.New("more JSON follows it")
	}
	return invalid("", "the request body must hold exactly one JSON object, but data follows the object (%v)", err)
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
// a key in other letter case (it matches "Code" to code). object is valid JSON text of an object.
func checkKeys(object []byte, sh shape) error {
	seen := map[string]bool{}
	var bad error
	eachMember(object, func(key string, _ []byte) bool {
		switch {
		case seen[key]:
			bad = invalid(key, "field %q is given twice; give each field once", key)
		case !slices.Contains(sh.fields, key):
			bad = bodyError(fmt.Errorf("json: unknown field %q", key), sh)
		}
		seen[key] = true
		return bad == nil
	})
	return bad
}

// eachMember calls fn with each key of object, valid JSON text of an object, and the text of
// its value (a part of object: nothing is copied), until fn returns false.
func eachMember(object []byte, fn func(key string, value []byte) bool) {
	i := skipSpace(object, 1) // after {
	for i < len(object) && object[i] == '"' {
		end := skipValue(object, i)
		var key string
		_ = json.Unmarshal(object[i:end], &key)
		i = skipSpace(object, end) + 1 // after :
		start := skipSpace(object, i)
		i = skipValue(object, start)
		if !fn(key, object[start:i]) {
			return
		}
		i = skipSpace(object, i)
		if i < len(object) && object[i] == ',' {
			i = skipSpace(object, i+1)
		}
	}
}

// skipSpace returns the index of the first byte of text at or after i that is not JSON white
// space.
func skipSpace(text []byte, i int) int {
	for i < len(text) && (text[i] == ' ' || text[i] == '\t' || text[i] == '\n' || text[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just after the JSON value that starts at i of valid JSON text.
func skipValue(text []byte, i int) int {
	depth := 0
	for ; i < len(text); i++ {
		switch c := text[i]; c {
		case '"':
			for i++; i < len(text) && text[i] != '"'; i++ {
				if text[i] == '\\' {
					i++
				}
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth == 0 {
				return i // the end of the object that holds a scalar
			}
			if depth--; depth == 0 {
				return i + 1
			}
		case ',', ' ', '\t', '\n', '\r', ':':
			if depth == 0 {
				return i
			}
		}
	}
	return i
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
