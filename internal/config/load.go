package config

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/sandpit-dev/sandpit/internal/suggest"
)

// EnvConfig is the environment variable that names the config file when LoadLookup is given none.
const EnvConfig = "SANDPIT_CONFIG"

// EnvName returns the environment variable of a key: SANDPIT_ and the key in upper case,
// with '-' read as '_' (EnvName("queue_length") == "SANDPIT_QUEUE_LENGTH").
func EnvName(key string) string {
	return "SANDPIT_" + strings.ToUpper(normalizeKey(key))
}

func normalizeKey(key string) string { return strings.ReplaceAll(key, "-", "_") }

// Keys returns every configuration key, in the order of Config's fields.
func Keys() []string {
	keys := make([]string, len(fields))
	for i, f := range fields {
		keys[i] = f.key
	}
	return keys
}

// defaultFile returns the config file read when LoadLookup is given no path and
// SANDPIT_CONFIG is unset: $XDG_CONFIG_HOME/sandpit/config.json, or
// ~/.config/sandpit/config.json; "" when neither XDG_CONFIG_HOME nor HOME is set.
func defaultFile(lookup func(string) (string, bool)) string {
	if d := xdgDir(lookup, "XDG_CONFIG_HOME", ".config"); d != "" {
		return filepath.Join(d, "sandpit", "config.json")
	}
	return ""
}

// FileOf returns the config file LoadLookup(path, lookup) reads, and whether it must exist:
// path, else the file SANDPIT_CONFIG names (both required), else the default file (read when it
// exists; "" when no home directory is known). lookup nil means os.LookupEnv.
func FileOf(path string, lookup func(string) (string, bool)) (file string, required bool) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	if path != "" {
		return path, true
	}
	if v, ok := lookup(EnvConfig); ok && v != "" {
		return v, true
	}
	return defaultFile(lookup), false
}

// LoadLookup returns the configuration: Default, overridden by the config file, overridden by
// the environment. It does not validate: apply flags with Set, then call Validate.
//
// The file is path when path is not empty, else the file SANDPIT_CONFIG names, else
// $XDG_CONFIG_HOME/sandpit/config.json or ~/.config/sandpit/config.json. A file named by path
// or SANDPIT_CONFIG must exist; the default file is read only when it exists. The file holds one JSON object whose keys are Config's json keys;
// unknown keys, duplicate keys, null values and values of the wrong type are errors naming the
// file, the line and column, and the key.
//
// Every key can then be set by its environment variable (see EnvName); a value that does not
// parse is an error naming the variable and the expected type.
//
// lookup looks up environment variables (including XDG_CONFIG_HOME, XDG_DATA_HOME and HOME for
// the defaults), as os.LookupEnv does; nil means os.LookupEnv. A variable that is set but empty
// counts as set: SANDPIT_PACKAGES="" means no packages, an empty string variable sets its key
// to "", and an empty numeric variable is an error.
func LoadLookup(path string, lookup func(string) (string, bool)) (Config, error) {
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := defaults(lookup)
	var errs []error
	file, required := FileOf(path, lookup)
	if file != "" {
		if err := c.loadFile(file, required); err != nil {
			errs = append(errs, err)
		}
	}
	if err := c.applyEnv(lookup); err != nil {
		errs = append(errs, err)
	}
	if len(errs) > 0 {
		// Every bad value at once: what did load is validated too (a trial's wrongly typed
		// memory_bytes hid its slots 0 and network "some" until it was fixed).
		if err := c.Validate(); err != nil {
			errs = append(errs, err)
		}
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

// Set sets one key from its text form, parsed as in the environment (see the package
// documentation). key is a json key; '-' may stand for '_' ("queue-length").
// For packages, "" means none; for string keys, "" sets the empty string.
func (c *Config) Set(key, value string) error {
	f, err := lookupField(key)
	if err != nil {
		return err
	}
	if err := f.setText(c.value(f), value); err != nil {
		return fmt.Errorf("%s=%q: %w", f.key, value, err)
	}
	return nil
}

// Get returns one key's value in the text form Set and the environment accept (sizes in
// plain bytes, packages comma-separated).
func (c Config) Get(key string) (string, error) {
	f, err := lookupField(key)
	if err != nil {
		return "", err
	}
	return f.format(reflect.ValueOf(c).Field(f.index)), nil
}

// Environ returns c as environment variables, SANDPIT_<KEY>=value for every key in Keys'
// order: a process that loads its configuration from them (LoadLookup) gets c back whatever
// its own defaults, config file or environment say. It is how a parent runs sandpit with a
// configuration it holds (tests of the daemon as a process).
func (c Config) Environ() []string {
	env := make([]string, len(fields))
	v := reflect.ValueOf(c)
	for i, f := range fields {
		env[i] = EnvName(f.key) + "=" + f.format(v.Field(f.index))
	}
	return env
}

// UnknownEnv returns the SANDPIT_ variables in environ (as os.Environ gives it) that name no
// key, such as a misspelt SANDPIT_SLOT, so that the caller can warn about them.
func UnknownEnv(environ []string) []string {
	var unknown []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "SANDPIT_") || name == EnvConfig {
			continue
		}
		if _, ok := fieldByEnv[name]; !ok {
			unknown = append(unknown, name)
		}
	}
	return unknown
}

// NearestEnv returns the setting's variable nearest to the unknown SANDPIT_ variable name
// (SANDPIT_SLOTS for SANDPIT_SLTOS), or "" when none is near.
func NearestEnv(name string) string {
	key := normalizeKey(strings.TrimPrefix(name, "SANDPIT_"))
	if best := suggest.Nearest(key, Keys(), 3); best != "" {
		return EnvName(best)
	}
	return ""
}

func lookupField(key string) (field, error) {
	if f, ok := fieldByKey[normalizeKey(key)]; ok {
		return f, nil
	}
	return field{}, fmt.Errorf("unknown configuration key %q%s", key, didYouMean(normalizeKey(key)))
}

func (c *Config) value(f field) reflect.Value { return reflect.ValueOf(c).Elem().Field(f.index) }

func (c *Config) applyEnv(lookup func(string) (string, bool)) error {
	var errs []error
	for _, f := range fields {
		name := EnvName(f.key)
		v, ok := lookup(name)
		if !ok {
			continue
		}
		if err := f.setText(c.value(f), v); err != nil {
			if v == "" {
				err = fmt.Errorf("%w; unset it to keep the default", err)
			}
			errs = append(errs, fmt.Errorf("environment variable %s=%q: %w", name, v, err))
		}
	}
	return errors.Join(errs...)
}

// loadFile overrides c with the settings in the JSON file name.
func (c *Config) loadFile(name string, required bool) error {
	data, err := os.ReadFile(name)
	if err != nil {
		if !required && errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("reading config file: %w", err)
	}
	data = bytes.TrimPrefix(data, []byte("\xef\xbb\xbf")) // a UTF-8 byte order mark
	at := func(off int64) string {
		line, col := position(data, off)
		return fmt.Sprintf("config file %s, line %d, column %d", name, line, col)
	}

	if len(bytes.TrimSpace(data)) == 0 {
		return fmt.Errorf("config file %s is empty; write {} for no settings", name)
	}
	var top any
	if err := json.Unmarshal(data, &top); err != nil {
		var se *json.SyntaxError
		if errors.As(err, &se) {
			return fmt.Errorf("%s: invalid JSON: %w", at(max(se.Offset-1, 0)), err)
		}
		return fmt.Errorf("config file %s: invalid JSON: %w", name, err)
	}
	if _, ok := top.(map[string]any); !ok {
		return fmt.Errorf("config file %s must hold one JSON object, such as {\"slots\": 4}", name)
	}

	dec := json.NewDecoder(bytes.NewReader(data))
	if _, err := dec.Token(); err != nil { // '{'
		return fmt.Errorf("config file %s: %w", name, err)
	}
	seen := map[string]int64{}
	var errs []error
	for dec.More() {
		keyAt := skip(data, dec.InputOffset(), " \t\r\n,")
		tok, err := dec.Token()
		if err != nil {
			return fmt.Errorf("%s: %w", at(keyAt), err)
		}
		key, _ := tok.(string)
		valAt := skip(data, dec.InputOffset(), " \t\r\n:")
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return fmt.Errorf("%s: %w", at(valAt), err)
		}
		f, ok := fieldByKey[key]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("%s: unknown key %q%s", at(keyAt), key, didYouMean(key)))
		case seen[key] != 0:
			line, _ := position(data, seen[key]-1)
			errs = append(errs, fmt.Errorf("%s: key %q is given twice (first on line %d); keep one", at(keyAt), key, line))
		case f.kind == kindObject && bytes.HasPrefix(raw, []byte("{")):
			// Its keys' problems are each at their own line, and its good keys are kept.
			if err := decodeObject(c.value(f), raw, key, func(off int64) string { return at(valAt + off) }); err != nil {
				errs = append(errs, err)
			}
		default:
			if err := f.setJSON(c.value(f), raw); err != nil {
				errs = append(errs, fmt.Errorf("%s: %s: %w", at(valAt), key, err))
			}
		}
		seen[key] = keyAt + 1
	}
	return errors.Join(errs...)
}

// skip returns the offset of the first byte at or after off that is not in chars.
func skip(data []byte, off int64, chars string) int64 {
	for off < int64(len(data)) && strings.IndexByte(chars, data[off]) >= 0 {
		off++
	}
	return off
}

// position returns the 1-based line and column (in bytes) of offset off in data.
func position(data []byte, off int64) (line, col int) {
	off = min(max(off, 0), int64(len(data)))
	prefix := data[:off]
	line = bytes.Count(prefix, []byte("\n")) + 1
	col = len(prefix) - (bytes.LastIndexByte(prefix, '\n') + 1) + 1
	return line, col
}

// suggest returns a "did you mean" hint for an unknown key, or a hint to list the keys.
func didYouMean(key string) string {
	if best := suggest.Nearest(key, Keys(), 3); best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return "; the keys are " + strings.Join(Keys(), ", ")
}

// The kinds of value a field holds.
const (
	kindString = iota
	kindInt
	kindSize // an integer field whose key ends in _bytes
	kindFloat
	kindList // []string
	kindBool
	kindObject // a struct, given as a JSON object (in the environment and Set: its JSON text)
)

// field describes one settable field of Config, found by reflecting over its json tags.
type field struct {
	key     string
	index   int
	kind    int
	bits    int
	example string // the default value, for error messages
}

var (
	fields     = buildFields()
	fieldByKey = map[string]field{}
	fieldByEnv = map[string]field{}
)

func init() {
	for _, f := range fields {
		fieldByKey[f.key] = f
		fieldByEnv[EnvName(f.key)] = f
	}
}

func buildFields() []field {
	t := reflect.TypeFor[Config]()
	def := reflect.ValueOf(defaults(func(string) (string, bool) { return "", false }))
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "" || name == "-" {
			continue
		}
		f := field{key: name, index: i}
		switch k := sf.Type.Kind(); {
		case k == reflect.String:
			f.kind = kindString
		case k >= reflect.Int && k <= reflect.Int64:
			f.kind, f.bits = kindInt, sf.Type.Bits()
			if strings.HasSuffix(name, "_bytes") {
				f.kind = kindSize
			}
		case k == reflect.Float64:
			f.kind = kindFloat
		case k == reflect.Bool:
			f.kind = kindBool
		case k == reflect.Slice && sf.Type.Elem().Kind() == reflect.String:
			f.kind = kindList
		case k == reflect.Struct, k == reflect.Map && sf.Type.Key().Kind() == reflect.String:
			f.kind = kindObject
		default:
			panic(fmt.Sprintf("config: field %s has type %s, which Set and the environment cannot parse", sf.Name, sf.Type))
		}
		f.example = f.format(def.Field(i))
		fs = append(fs, f)
	}
	return fs
}

// expected describes the values f accepts, for error messages.
func (f field) expected() string {
	switch f.kind {
	case kindInt:
		return "expected a whole number, such as " + f.example
	case kindSize: // only for JSON values of the wrong type; ParseSize explains the text form
		return "expected a size: a number of bytes, or a string holding a whole number followed by KiB, MiB or GiB (such as \"512MiB\")"
	case kindFloat:
		return "expected a number, such as " + f.example
	case kindList: // only for JSON values of the wrong type; any text is a list
		return "expected a list of strings, such as [\"numpy\", \"pandas\"] ([] for none)"
	case kindBool:
		return "expected true or false"
	case kindObject:
		if f.example == "null" { // a map: its keys are the user's
			return "expected a JSON object, such as {\"alice/tools\": 1}"
		}
		return "expected a JSON object, such as {\"namespace\": \"sandpit\"}"
	}
	return "expected a string"
}

// setText sets v from the text form used by the environment and Set.
func (f field) setText(v reflect.Value, s string) error {
	switch f.kind {
	case kindString:
		v.SetString(s)
	case kindInt:
		n, err := strconv.ParseInt(strings.TrimSpace(s), 10, f.bits)
		if err != nil {
			if errors.Is(err, strconv.ErrRange) {
				return errors.New("the number is too large")
			}
			return errors.New(f.expected())
		}
		v.SetInt(n)
	case kindSize:
		n, err := ParseSize(s)
		if err != nil {
			return err
		}
		if v.OverflowInt(n) {
			return errors.New("the size is too large")
		}
		v.SetInt(n)
	case kindFloat:
		x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
			return errors.New(f.expected())
		}
		v.SetFloat(x)
	case kindBool:
		b, err := strconv.ParseBool(strings.TrimSpace(s))
		if err != nil {
			return errors.New(f.expected())
		}
		v.SetBool(b)
	case kindObject:
		return decodeObject(v, []byte(s), f.key, nil)
	case kindList:
		list := []string{}
		for item := range strings.SplitSeq(s, ",") {
			if item = strings.TrimSpace(item); item != "" {
				list = append(list, item)
			}
		}
		v.Set(reflect.ValueOf(list))
	}
	return nil
}

// setJSON sets v from the JSON value raw read from the config file.
func (f field) setJSON(v reflect.Value, raw json.RawMessage) error {
	raw = bytes.TrimSpace(raw)
	if string(raw) == "null" {
		return errors.New("null is not allowed; give a value, or leave the key out for the default")
	}
	isString, isNumber := raw[0] == '"', raw[0] == '-' || (raw[0] >= '0' && raw[0] <= '9')
	got := string(raw)
	if len(got) > 40 {
		got = got[:37] + "..."
	}
	switch f.kind {
	case kindString:
		var s string
		if !isString || json.Unmarshal(raw, &s) != nil {
			return fmt.Errorf("%s, got %s", f.expected(), got)
		}
		v.SetString(s)
	case kindInt, kindFloat:
		if !isNumber {
			return fmt.Errorf("%s, got %s", f.expected(), got)
		}
		if err := f.setText(v, string(raw)); err != nil {
			return fmt.Errorf("%w, got %s", err, got)
		}
	case kindSize:
		text := string(raw)
		if isString {
			if json.Unmarshal(raw, &text) != nil {
				return fmt.Errorf("%s, got %s", f.expected(), got)
			}
		} else if !isNumber {
			return fmt.Errorf("%s, got %s", f.expected(), got)
		}
		n, err := ParseSize(text)
		if err != nil {
			return err
		}
		if v.OverflowInt(n) {
			return errors.New("the size is too large")
		}
		v.SetInt(n)
	case kindBool:
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return fmt.Errorf("%s, got %s", f.expected(), got)
		}
		v.SetBool(b)
	case kindObject:
		if raw[0] != '{' {
			return fmt.Errorf("%s, got %s", f.expected(), got)
		}
		return decodeObject(v, raw, f.key, nil)
	case kindList:
		var list []string
		if raw[0] != '[' || json.Unmarshal(raw, &list) != nil {
			return fmt.Errorf("%s, got %s", f.expected(), got)
		}
		if list == nil {
			list = []string{}
		}
		v.Set(reflect.ValueOf(list))
	}
	return nil
}

// format returns v in the text form setText reads.
func (f field) format(v reflect.Value) string {
	switch f.kind {
	case kindInt, kindSize:
		return strconv.FormatInt(v.Int(), 10)
	case kindFloat:
		return strconv.FormatFloat(v.Float(), 'g', -1, 64)
	case kindBool:
		return strconv.FormatBool(v.Bool())
	case kindList:
		list := v.Interface().([]string)
		return strings.Join(list, ",")
	case kindObject:
		b, _ := json.Marshal(v.Interface())
		return string(b)
	}
	return v.String()
}

// decodeObject decodes the JSON object text into the struct v, over its current values (keys
// left out keep them), or into the map v, which it replaces. Each unknown key, in it or in an object nested in it, is an error naming
// it as "key.nested" (with a did-you-mean), and the known keys are still set, so that a misspelt
// key does not hide the rest. at, if not nil, names the place of an offset in text ("config
// file F, line L, column C"), which then starts each error.
func decodeObject(v reflect.Value, text []byte, key string, at func(off int64) string) error {
	var errs []error
	unknownKeys(text, 0, v.Type(), key, func(off int64, msg string) {
		if at != nil {
			msg = at(off) + ": " + msg
		}
		errs = append(errs, errors.New(msg))
	})
	ptr := reflect.New(v.Type())
	if v.Kind() == reflect.Struct { // a map's keys are all given: it replaces the one before
		ptr.Elem().Set(v)
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	if err := dec.Decode(ptr.Interface()); err != nil {
		if te, ok := errors.AsType[*json.UnmarshalTypeError](err); ok && te.Field != "" {
			// The other keys are set: keep them, as for an unknown key.
			v.Set(ptr.Elem())
			err = fmt.Errorf("%s.%s: expected a JSON %s, got %s", key, te.Field, jsonKind(te.Type), te.Value)
		} else {
			err = fmt.Errorf("%s: expected a JSON object of its keys: %w", key, err)
		}
		if at != nil {
			err = fmt.Errorf("%s: %w", at(0), err)
		}
		errs = append(errs, err)
	} else if dec.More() {
		errs = append(errs, errors.New("expected one JSON object, got more after it"))
	} else {
		v.Set(ptr.Elem())
	}
	if at == nil && len(errs) > 0 {
		// One line, as the caller prefixes it with the variable or key it came from.
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		return errors.New(strings.Join(msgs, "; "))
	}
	return errors.Join(errs...)
}

// jsonKind names the JSON value a Go type is decoded from.
func jsonKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String:
		return "string"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64, reflect.Uint, reflect.Uint8,
		reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Float32, reflect.Float64:
		return "number"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice, reflect.Array:
		return "list"
	}
	return "object"
}

// unknownKeys calls report, with the key's offset (from base) and a message, for every key of
// the JSON object text (at offset base) that names no field of the struct type t, and so on
// down the fields that are structs or lists of structs. path names the object for messages
// ("kubernetes", "kubernetes.tolerations entry 1"). Text that is not such an object is left
// to the decoder to report.
func unknownKeys(text []byte, base int64, t reflect.Type, path string, report func(off int64, msg string)) {
	if t.Kind() != reflect.Struct { // a map's keys are the user's to choose
		return
	}
	fieldsOf := map[string]reflect.Type{}
	var names []string
	for i := range t.NumField() {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if !sf.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		fieldsOf[name] = sf.Type
		names = append(names, name)
	}
	dec := json.NewDecoder(bytes.NewReader(text))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return
	}
	for dec.More() {
		keyAt := skip(text, dec.InputOffset(), " \t\r\n,")
		tok, err := dec.Token()
		if err != nil {
			return
		}
		key, _ := tok.(string)
		valAt := skip(text, dec.InputOffset(), " \t\r\n:")
		var raw json.RawMessage
		if err := dec.Decode(&raw); err != nil {
			return
		}
		ft, ok := fieldsOf[key]
		if !ok {
			hint := "; its keys are " + strings.Join(names, ", ")
			if best := suggest.Nearest(key, names, 3); best != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", best)
			}
			where := "the " + path + " object"
			if strings.Contains(path, " entry ") {
				where = path
			}
			report(base+keyAt, fmt.Sprintf("unknown key %q in %s%s", key, where, hint))
			continue
		}
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			unknownKeys(raw, base+valAt, ft, path+"."+key, report)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			list := json.NewDecoder(bytes.NewReader(raw))
			if tok, err := list.Token(); err != nil || tok != json.Delim('[') {
				continue
			}
			for n := 1; list.More(); n++ {
				elemAt := skip(raw, list.InputOffset(), " \t\r\n,")
				var elem json.RawMessage
				if list.Decode(&elem) != nil {
					break
				}
				unknownKeys(elem, base+valAt+elemAt, ft.Elem(), fmt.Sprintf("%s.%s entry %d", path, key, n), report)
			}
		}
	}
}
