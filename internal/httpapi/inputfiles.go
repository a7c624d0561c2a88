package httpapi

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// The encodings of an input file's content in a request body.
const (
	EncodingUTF8   = "utf-8"  // content is the file's text (the default)
	EncodingBase64 = "base64" // content is the file's bytes in standard base64 (RFC 4648, padded)
)

// fileFields are the fields of an input file in a request body.
var fileFields = []string{"name", "content", "encoding"}

// fileBody is an input file in a request body.
type fileBody struct {
	Name     string `json:"name"`
	Content  string `json:"content"`
	Encoding string `json:"encoding"`
}

// filesExpect is what the field files must be, for type errors.
const filesExpect = `must be a list of files such as [{"name": "data.csv", "content": "a,b\n1,2\n"}] ` +
	`(content is text, or base64 with "encoding": "base64")`

// runFiles is the field files of a run's body, skipped by the decoder: readRunBody decodes
// the files from the body's bytes.
type runFiles struct{}

func (*runFiles) UnmarshalJSON([]byte) error { return nil }

// decodeFilesText decodes text, the JSON value of a body's field files (nil when absent), by
// decodeFiles. It copies nothing of text but what decodeFiles keeps.
func decodeFilesText(text []byte) ([]sandbox.InputFile, error) {
	if text == nil || string(text) == "null" {
		return nil, nil
	}
	if text[0] != '[' {
		return nil, invalid("files", "files %s, not %s", filesExpect, jsonKind(text[0]))
	}
	var items []json.RawMessage // parts of text
	for i := skipSpace(text, 1); i < len(text) && text[i] != ']'; {
		end := skipValue(text, i)
		items = append(items, text[i:end:end])
		i = skipSpace(text, end)
		if i < len(text) && text[i] == ',' {
			i = skipSpace(text, i+1)
		}
	}
	if items == nil {
		items = []json.RawMessage{}
	}
	return decodeFiles(items)
}

// decodeFiles turns the files of a request body (nil when absent) into input files. Each must
// be an object of the fields name, content and encoding (each once, in that letter case); the
// errors name the field at fault as files[i].name, files[i].content or files[i].encoding.
// Names and sizes are checked by the sandbox (engine.Service.Validate). Each element of raw
// is dropped (set to nil) once decoded.
func decodeFiles(raw []json.RawMessage) ([]sandbox.InputFile, error) {
	if raw == nil {
		return nil, nil
	}
	files := make([]sandbox.InputFile, len(raw))
	for i := range raw {
		field := fmt.Sprintf("files[%d]", i)
		var b fileBody
		err := decodeFileObject(raw[i], &b, field)
		raw[i] = nil
		if err != nil {
			return nil, err
		}
		files[i].Name = b.Name
		switch b.Encoding {
		case "", EncodingUTF8:
			files[i].Content = []byte(b.Content)
		case EncodingBase64:
			content, err := base64.StdEncoding.DecodeString(b.Content)
			if err != nil {
				return nil, invalid(field+".content", "%s.content (file %q) is not valid base64 (%v); send standard base64 (RFC 4648, with padding), or the text itself without \"encoding\"",
					field, b.Name, err)
			}
			files[i].Content = content
		default:
			return nil, invalid(field+".encoding", "%s.encoding is %q; use \"utf-8\" (the default: content is the text) or \"base64\"", field, b.Encoding)
		}
	}
	return files, nil
}

// decodeFileObject decodes one file of files into b, refusing what the top level refuses: not
// an object, a field unknown, repeated or in other letter case, a value of the wrong type. raw
// is valid JSON (a part of the body decodeBody checked).
func decodeFileObject(raw json.RawMessage, b *fileBody, field string) error {
	if len(raw) == 0 || raw[0] != '{' {
		return invalid(field, "%s must be an object such as {\"name\": \"data.csv\", \"content\": \"a,b\\n1,2\\n\"}, not %s", field, jsonKind(raw[0]))
	}
	seen := map[string]bool{}
	var bad error
	eachMember(raw, func(key string, v []byte) bool {
		if !slices.Contains(fileFields, key) {
			bad = invalid(field+"."+key, "%s has the unknown field %q; a file's fields are name, content and encoding", field, key)
			return false
		}
		if seen[key] {
			bad = invalid(field+"."+key, "%s.%s is given twice; give each field once", field, key)
			return false
		}
		seen[key] = true
		var s *string
		if err := json.Unmarshal(v, &s); err != nil {
			bad = invalid(field+"."+key, "%s.%s must be a string, not %s", field, key, jsonKind(v[0]))
			return false
		}
		if s == nil {
			return true // null: absent
		}
		switch key {
		case "name":
			b.Name = *s
		case "content":
			b.Content = *s
		case "encoding":
			b.Encoding = *s
		}
		return true
	})
	if bad != nil {
		return bad
	}
	if !seen["name"] {
		return invalid(field+".name", "%s has no name; give the file's path relative to the run's directory, such as \"data.csv\"", field)
	}
	return nil
}

// filesBodyBytes is what input files at their caps may take in a request body: their bytes
// in base64 (4/3 of them) and each file's name, field names and quoting.
func filesBodyBytes(cfg engine.Config) int64 {
	return (cfg.MaxInputFilesBytes+2)/3*4 + int64(cfg.MaxInputFiles)*(2*sandbox.MaxFileNameBytes+64)
}
