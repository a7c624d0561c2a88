package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"mime"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/client"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A run's output files as MCP content (the spec's tool results: image content, embedded
// resources and resource links), each named by a URI that resources/read answers.

// fileURIPrefix begins the URI of an output file: sandpit://executions/{id}/files/{name}.
const fileURIPrefix = "sandpit://executions/"

// fileURITemplate is the resource template of output files ({+name}: the name's "/" stay).
const fileURITemplate = fileURIPrefix + "{id}/files/{+name}"

const fileResourceDoc = `An output file of one of your runs (a file its code wrote in its working directory, or a chart it drew), as run_code and run_saved_code list it. Kept as long as the run's record, within the daemon's quota for files.`

// MaxInlineFileBytes is the largest output file a tool result carries whole (an image, or an
// embedded resource); a larger one is a resource link to read with resources/read.
const MaxInlineFileBytes = 1 << 20

// FileURI is the URI of execution id's output file name: each part of name is escaped on its
// own, so "/" stays a separator.
func FileURI(id, name string) string {
	parts := strings.Split(name, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return fileURIPrefix + url.PathEscape(id) + "/files/" + strings.Join(parts, "/")
}

// parseFileURI reads an execution ID and a file name from a FileURI; ok is false when uri is
// not one (or its name is not a valid file name).
func parseFileURI(uri string) (id, name string, ok bool) {
	rest, found := strings.CutPrefix(uri, fileURIPrefix)
	if !found {
		return "", "", false
	}
	id, escaped, found := strings.Cut(rest, "/files/")
	if !found || !sandbox.ValidID(id) {
		return "", "", false
	}
	parts := strings.Split(escaped, "/")
	for i, p := range parts {
		var err error
		if parts[i], err = url.PathUnescape(p); err != nil || strings.Contains(parts[i], "/") {
			return "", "", false
		}
	}
	name = strings.Join(parts, "/")
	if sandbox.CheckFileName(name) != nil {
		return "", "", false
	}
	return id, name, true
}

// isImage says whether mediaType is a raster image an MCP client shows: PNG, JPEG, GIF or WebP.
func isImage(mediaType string) (string, bool) {
	mt, _, _ := mime.ParseMediaType(mediaType)
	switch mt {
	case "image/png", "image/jpeg", "image/gif", "image/webp":
		return mt, true
	}
	return mt, false
}

// fileContent is output file f of execution id as tool result content, content being its
// bytes when the answer carried them (nil otherwise): an image of at most MaxInlineFileBytes
// as image content; another file of at most that as an embedded resource (text for text/* in
// UTF-8, else a blob); any other as a resource link to its URI.
func fileContent(id string, f sandbox.File, content []byte) mcp.Content {
	uri := FileURI(id, f.Name)
	if content == nil || f.SizeBytes > MaxInlineFileBytes {
		size := f.SizeBytes
		return &mcp.ResourceLink{URI: uri, Name: f.Name, MIMEType: f.MediaType, Size: &size,
			Description: fmt.Sprintf("output file %s of execution %s (%d bytes): read it with resources/read", f.Name, id, f.SizeBytes)}
	}
	if mt, ok := isImage(f.MediaType); ok {
		return &mcp.ImageContent{Data: content, MIMEType: mt}
	}
	return &mcp.EmbeddedResource{Resource: resourceContents(uri, f, content)}
}

// resourceContents are the contents of output file f at uri: its text for text/* in UTF-8,
// else its bytes as a blob.
func resourceContents(uri string, f sandbox.File, content []byte) *mcp.ResourceContents {
	rc := &mcp.ResourceContents{URI: uri, MIMEType: f.MediaType}
	if mt, _ := isImage(f.MediaType); strings.HasPrefix(mt, "text/") && utf8.Valid(content) {
		rc.Text = string(content)
	} else {
		rc.Blob = content
	}
	return rc
}

// readFile answers resources/read of an output file's URI: the file of one of this server's
// agent's executions (another agent's is not found), as the ledger lists it.
func (t *tools) readFile(ctx context.Context, req *mcp.ReadResourceRequest) (*mcp.ReadResourceResult, error) {
	uri := req.Params.URI
	id, name, ok := parseFileURI(uri)
	if !ok {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	files, _, _, err := t.c.ExecutionFiles(ctx, id, t.agent)
	var api *client.APIError
	if errors.As(err, &api) && api.Status == 404 {
		return nil, mcp.ResourceNotFoundError(uri)
	}
	if err != nil {
		return nil, toolError(err)
	}
	for _, f := range files {
		if f.Name != name {
			continue
		}
		content, err := t.c.ReadFile(ctx, id, f, 0)
		if errors.As(err, &api) && api.Status == 404 {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, toolError(err)
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{resourceContents(uri, f, content)}}, nil
	}
	return nil, mcp.ResourceNotFoundError(uri)
}
