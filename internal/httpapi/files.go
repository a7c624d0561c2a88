package httpapi

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"slices"
	"strconv"
	"time"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/engine"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
	"github.com/sandpit-dev/sandpit/internal/store"
)

// OutputFiles serves the bytes of runs' kept output files; *store.Files satisfies it.
type OutputFiles interface {
	// Open returns the bytes of execution id's output file name; an error wrapping
	// store.ErrEvicted when they are no longer kept.
	Open(ctx context.Context, id, name string) (io.ReadCloser, error)
	// Kept returns the names of execution id's output files whose bytes are kept.
	Kept(ctx context.Context, id string) (map[string]bool, error)
	// Used returns the bytes all kept files take and the quota on them (files_max_bytes).
	Used() (used, quota int64)
}

var _ OutputFiles = (*store.Files)(nil)

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

// readRunBody reads the body of a request that starts a run into v (which holds the
// request's files, as sent, in *files) and checks those files: readBody's answers, with a
// 413 that says how to send less, and decodeFiles'. On an error it has answered the request
// and returns false.
func readRunBody(w http.ResponseWriter, r *http.Request, cfg engine.Config, v any, sh shape, files *[]json.RawMessage) ([]sandbox.InputFile, bool) {
	if err := readBody(w, r, maxBodyBytes(cfg), v, sh); err != nil {
		if e, ok := err.(*requestError); ok && e.status == http.StatusRequestEntityTooLarge {
			e.msg += tooLargeHint(cfg)
		}
		writeError(w, err)
		return nil, false
	}
	decoded, err := decodeFiles(*files)
	if err != nil {
		writeError(w, err)
		return nil, false
	}
	return decoded, true
}

// decodeFiles turns the files of a request body (nil when absent) into input files. Each must
// be an object of the fields name, content and encoding (each once, in that letter case); the
// errors name the field at fault as files[i].name, files[i].content or files[i].encoding.
// Names and sizes are checked by the sandbox (engine.Service.Validate).
func decodeFiles(raw []json.RawMessage) ([]sandbox.InputFile, error) {
	if raw == nil {
		return nil, nil
	}
	files := make([]sandbox.InputFile, len(raw))
	for i, r := range raw {
		field := fmt.Sprintf("files[%d]", i)
		var b fileBody
		if err := decodeFileObject(r, &b, field); err != nil {
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
// an object, a field unknown, repeated or in other letter case, a value of the wrong type.
func decodeFileObject(raw json.RawMessage, b *fileBody, field string) error {
	if len(raw) == 0 || raw[0] != '{' {
		return invalid(field, "%s must be an object such as {\"name\": \"data.csv\", \"content\": \"a,b\\n1,2\\n\"}, not %s", field, jsonKind(raw[0]))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	_, _ = dec.Token() // {
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return invalid(field, "%s is not valid JSON (%v)", field, err)
		}
		key, _ := tok.(string)
		if !slices.Contains(fileFields, key) {
			return invalid(field+"."+key, "%s has the unknown field %q; a file's fields are name, content and encoding", field, key)
		}
		if seen[key] {
			return invalid(field+"."+key, "%s.%s is given twice; give each field once", field, key)
		}
		seen[key] = true
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return invalid(field, "%s is not valid JSON (%v)", field, err)
		}
		var s *string
		if err := json.Unmarshal(v, &s); err != nil {
			return invalid(field+"."+key, "%s.%s must be a string, not %s", field, key, jsonKind(v[0]))
		}
		if s == nil {
			continue // null: absent
		}
		switch key {
		case "name":
			b.Name = *s
		case "content":
			b.Content = *s
		case "encoding":
			b.Encoding = *s
		}
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

// answerOf returns res as answered, with its files' bytes from a.files when inline (each file
// of at most apitype.MaxInlineFileBytes, up to apitype.MaxInlineBytes in all).
func (a *api) answerOf(ctx context.Context, res sandbox.Result, inline bool) apitype.Result {
	out := ResultOf(res)
	var inlined int64
	for i, f := range out.Files {
		if inline && a.files != nil && f.SizeBytes <= apitype.MaxInlineFileBytes && inlined+f.SizeBytes <= apitype.MaxInlineBytes {
			inlined += f.SizeBytes
			if b, err := a.readFile(ctx, res.ID, f.Name); err == nil {
				out.Files[i].ContentBase64 = base64.StdEncoding.EncodeToString(b)
			} else {
				a.log.Warn("an output file could not be read back for the answer", "id", res.ID, "error", err)
			}
		}
	}
	return out
}

// readFile reads execution id's output file name, at most apitype.MaxInlineFileBytes of it.
func (a *api) readFile(ctx context.Context, id, name string) ([]byte, error) {
	rc, err := a.files.Open(ctx, id, name)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, apitype.MaxInlineFileBytes+1))
	if err == nil && len(b) > apitype.MaxInlineFileBytes {
		err = fmt.Errorf("file %q is over %d bytes", name, apitype.MaxInlineFileBytes)
	}
	return b, err
}

// getExecutionFile answers GET /v1/executions/{id}/files/{name...}: the bytes of an output file
// the record lists, as an attachment (inline for raster images), with its media type, under a
// sandboxing Content-Security-Policy. 404 when the record (of the agent, with ?agent=) does not
// exist or lists no such file; 410 when its bytes were evicted (files_max_bytes).
func (a *api) getExecutionFile(w http.ResponseWriter, r *http.Request) {
	e, err := a.scopedExecution(r)
	if err != nil {
		a.fail(w, r, err)
		return
	}
	name := r.PathValue("name")
	i := slices.IndexFunc(e.Files, func(f sandbox.File) bool { return f.Name == name })
	if i < 0 {
		writeError(w, &requestError{status: http.StatusNotFound, code: apitype.CodeNotFound, field: "name",
			msg: fmt.Sprintf("execution %s has no output file %q; GET /v1/executions/%s lists its files under \"files\"", e.ID, name, e.ID)})
		return
	}
	f := e.Files[i]
	if a.files == nil {
		writeError(w, gone(e.ID, name, "this server keeps no output files"))
		return
	}
	rc, err := a.files.Open(r.Context(), e.ID, name)
	if errors.Is(err, store.ErrEvicted) {
		writeError(w, gone(e.ID, name, "the quota on all runs' files (files_max_bytes) evicted it to make room for newer runs' files"))
		return
	}
	if err != nil {
		a.fail(w, r, err)
		return
	}
	defer rc.Close()
	setFileHeaders(w.Header(), f)
	if rs, ok := rc.(io.ReadSeeker); ok {
		var modified time.Time
		if e.EndedAt != nil {
			modified = *e.EndedAt
		}
		http.ServeContent(w, r, "", modified, rs)
		return
	}
	w.Header().Set("Content-Length", strconv.FormatInt(f.SizeBytes, 10))
	w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(w, rc)
}

// gone is the 410 of an output file whose bytes are no longer kept (class errclass.Gone). It
// names no field: the file's name is in the path, and the message names it.
func gone(id, name, why string) error {
	return errclass.Newf(errclass.Gone, "output file %q of execution %s is no longer kept: %s", name, id, why)
}

// setFileHeaders sets the headers of an output file's bytes: its media type (when it parses;
// else application/octet-stream), never sniffed, as an attachment unless it is a raster image,
// under a Content-Security-Policy that sandboxes it and loads nothing, with its digest as ETag.
func setFileHeaders(h http.Header, f sandbox.File) {
	mt, params, err := mime.ParseMediaType(f.MediaType)
	contentType := mime.FormatMediaType(mt, params)
	if err != nil || contentType == "" {
		mt, contentType = "application/octet-stream", "application/octet-stream"
	}
	h.Set("Content-Type", contentType)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "sandbox; default-src 'none'")
	disposition := "attachment"
	if _, raster := sandbox.RasterImage(mt); raster {
		disposition = "inline"
	}
	if d := mime.FormatMediaType(disposition, map[string]string{"filename": path.Base(f.Name)}); d != "" {
		disposition = d
	}
	h.Set("Content-Disposition", disposition)
	if len(f.SHA256) == 64 {
		h.Set("ETag", `"`+f.SHA256+`"`)
	}
	h.Set("Cache-Control", "private")
}

// scopedExecution returns the record of the path's {id}; with the query parameter agent,
// another agent's record does not exist (as an agent's tools ask).
func (a *api) scopedExecution(r *http.Request) (store.Execution, error) {
	q := r.URL.Query()
	if err := checkQuery(q, "agent"); err != nil {
		return store.Execution{}, err
	}
	e, err := a.ledger.GetExecution(r.Context(), r.PathValue("id"))
	if err == nil && q.Get("agent") != "" && q.Get("agent") != e.Agent {
		err = fmt.Errorf("execution %q of agent %q: %w", r.PathValue("id"), q.Get("agent"), store.ErrNotFound)
	}
	return e, err
}
