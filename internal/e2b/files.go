package e2b

import (
	"compress/gzip"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"

	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// readChunk is how much of a file one read of the workspace takes on a download.
const readChunk = 4 << 20

// fileEntry is envd's EntryInfo of an upload's answer.
type fileEntry struct {
	Path string `json:"path"`
	Name string `json:"name"`
	Type string `json:"type"`
}

// download is GET /files?path=P: the file's bytes, read from the workspace in chunks.
func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	p := r.URL.Query().Get("path")
	if p == "" {
		writeError(w, http.StatusBadRequest, "path is required: the file to download (absolute, or relative to /home/user)")
		return
	}
	ctx := r.Context()
	first, err := s.workspace.ReadFile(ctx, b.agent, b.id, p, 0, readChunk)
	if err != nil {
		writeFileError(w, p, err)
		return
	}
	defer func() { first.Done() }() // the last chunk's; each earlier one is done once written
	if first.Entry.Type != "file" {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path %q is a %s, not a file", first.Entry.Path, first.Entry.Type))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", mime.FormatMediaType("attachment", map[string]string{"filename": first.Entry.Name}))
	w.Header().Set("Content-Length", strconv.FormatInt(first.Entry.SizeBytes, 10))
	if _, err := w.Write(first.Content); err != nil {
		return
	}
	for off := int64(len(first.Content)); off < first.Entry.SizeBytes && len(first.Content) == readChunk; off += int64(len(first.Content)) {
		first.Done()
		if first, err = s.workspace.ReadFile(ctx, b.agent, b.id, p, off, readChunk); err != nil {
			s.log.Warn("a download stopped short", "sandbox", b.id, "path", p, "offset", off, "error", err)
			return
		}
		if _, err := w.Write(first.Content); err != nil {
			return
		}
	}
}

// upload is POST /files: a raw body (application/octet-stream, to path) or multipart parts
// named file (each to path, or to the part's filename when path is absent or there are
// several). Parents are made. The answer lists what was written.
func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	b := boxOf(r.Context())
	ctx := r.Context()
	p := r.URL.Query().Get("path")
	ct, params, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	var written []fileEntry
	write := func(dst string, body io.Reader) bool {
		e, err := s.workspace.WriteFile(ctx, b.agent, b.id, dst, body, true)
		if err != nil {
			writeFileError(w, dst, err)
			return false
		}
		written = append(written, fileEntry{Path: e.Path, Name: e.Name, Type: "file"})
		return true
	}
	switch ct {
	case "multipart/form-data":
		mr := multipart.NewReader(r.Body, params["boundary"])
		var parts int
		for {
			part, err := mr.NextPart()
			if err == io.EOF {
				break
			}
			if err != nil {
				writeError(w, http.StatusBadRequest, "the multipart body could not be read: "+err.Error())
				return
			}
			parts++
			// Part.FileName keeps only the last element; the SDKs send the whole path.
			_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			dst := disp["filename"]
			if p != "" && (dst == "" || parts == 1 && r.URL.Query().Has("path")) {
				dst = p
			}
			if dst == "" {
				writeError(w, http.StatusBadRequest, "a part has no filename and the request no path: name where the file goes")
				return
			}
			if !write(dst, part) {
				return
			}
		}
		if parts == 0 {
			writeError(w, http.StatusBadRequest, "the multipart body has no part: send the file as a part named file")
			return
		}
	default:
		if p == "" {
			writeError(w, http.StatusBadRequest, "path is required with a raw body (application/octet-stream): where the file goes")
			return
		}
		var body io.Reader = r.Body
		switch enc := r.Header.Get("Content-Encoding"); enc {
		case "", "identity":
		case "gzip":
			zr, err := gzip.NewReader(r.Body)
			if err != nil {
				writeError(w, http.StatusBadRequest, "the body is not gzip, as Content-Encoding says: "+err.Error())
				return
			}
			defer zr.Close()
			body = zr
		default:
			writeError(w, http.StatusUnsupportedMediaType, fmt.Sprintf("Content-Encoding %q is not supported: send gzip or identity", enc))
			return
		}
		if !write(p, body) {
			return
		}
	}
	writeJSON(w, http.StatusOK, written)
}

// writeFileError answers a workspace file error as envd does.
func writeFileError(w http.ResponseWriter, p string, err error) {
	status := statusOf(err)
	if errclass.Of(err) == errclass.TooLarge {
		status = http.StatusInsufficientStorage
	}
	writeError(w, status, fmt.Sprintf("path %q: %v", p, err))
}
