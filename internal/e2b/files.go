package e2b

import (
	"compress/gzip"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/sandpit-dev/sandpit/internal/connlimit"
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
	first, err := b.sess.ReadFile(ctx, p, 0, readChunk)
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
	if err := connlimit.Write(w, first.Content); err != nil {
		return
	}
	for off := int64(len(first.Content)); off < first.Entry.SizeBytes && len(first.Content) == readChunk; off += int64(len(first.Content)) {
		first.Done()
		if first, err = b.sess.ReadFile(ctx, p, off, readChunk); err != nil {
			s.log.Warn("a download stopped short", "sandbox", b.id, "path", p, "offset", off, "error", err)
			return
		}
		if err := connlimit.Write(w, first.Content); err != nil {
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
		e, err := b.sess.WriteFile(ctx, dst, body, true)
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
		// A signed URL (upload_url) opens its one path, not the home: its signature covers
		// path alone, so a holder of the link may not name other files in the parts.
		signed := signedFiles(r)
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
			if signed && parts > 1 {
				writeError(w, http.StatusBadRequest, "a signed upload URL writes its one path: send the file as one part (upload_url for each file)")
				return
			}
			// Part.FileName keeps only the last element; the SDKs send the whole path.
			_, disp, _ := mime.ParseMediaType(part.Header.Get("Content-Disposition"))
			dst := disp["filename"]
			if signed || p != "" && (dst == "" || parts == 1 && r.URL.Query().Has("path")) {
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

// Signed file URLs (the SDKs' download_url and upload_url) carry no access token: the query's
// signature stands for it, and names the sandbox when the URL does not (the SDKs compose
// {sandbox URL origin}/files?path=P&signature=S[&signature_expiration=T][&username=U], which
// with one E2B_SANDBOX_URL for every sandbox names none). A signature is E2B's v1:
//
//	"v1_" + base64 (standard alphabet, unpadded) of SHA-256("P:OP:U:TOKEN[:T]")
//
// where OP is read for GET and write for POST, U the username ("" for the default user),
// TOKEN the sandbox's access token and T, when given, the Unix second it expires after.

// fileSignature is the signature of a file URL.
func fileSignature(p, op, user, token, expiry string) string {
	raw := p + ":" + op + ":" + user + ":" + token
	if expiry != "" {
		raw += ":" + expiry
	}
	sum := sha256.Sum256([]byte(raw))
	return "v1_" + base64.RawStdEncoding.EncodeToString(sum[:])
}

// signedFiles reports whether r is a signed file URL's request to envd: GET or POST /files
// with a signature.
func signedFiles(r *http.Request) bool {
	return (r.Method == http.MethodGet || r.Method == http.MethodPost) && r.URL.Path == "/files" && r.URL.Query().Get("signature") != ""
}

// checkSignature says why r's signature does not open a sandbox whose token is token ("" when
// it does): it is not that token's, or it has expired.
func checkSignature(r *http.Request, token string, now time.Time) string {
	q := r.URL.Query()
	expiry := q.Get("signature_expiration")
	if expiry != "" {
		t, err := strconv.ParseInt(expiry, 10, 64)
		if err != nil {
			return fmt.Sprintf("signature_expiration %q is not a Unix time in seconds", expiry)
		}
		if now.Unix() > t {
			return "the signed URL has expired (signature_expiration " + expiry + "): ask the SDK for a new one"
		}
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	want := fileSignature(q.Get("path"), op, q.Get("username"), token, expiry)
	if subtle.ConstantTimeCompare([]byte(q.Get("signature")), []byte(want)) != 1 {
		return "the signature is not valid for this path, operation and sandbox: sign the URL with the sandbox's access token (download_url, upload_url)"
	}
	return ""
}

// serveSigned serves a signed file URL that names no sandbox: the sandbox is the one whose
// access token made the signature.
func (s *Server) serveSigned(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	boxes := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		boxes = append(boxes, b)
	}
	s.mu.Unlock()
	now, why := time.Now(), "the signature is no running sandbox's: the sandbox was killed or timed out, or the URL was not made by download_url or upload_url"
	for _, b := range boxes {
		msg := checkSignature(r, b.token, now)
		if msg == "" {
			r.Header.Set("E2b-Sandbox-Id", b.id)
			r.Header.Set("E2b-Sandbox-Port", EnvdPort)
			s.ServeHTTP(w, r)
			return
		}
		if !strings.HasPrefix(msg, "the signature is not valid") {
			why = msg // the same for every sandbox: malformed or expired
			break
		}
	}
	writeError(w, http.StatusUnauthorized, why)
}
