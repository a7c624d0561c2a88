package mcpserver

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
	"github.com/sandpit-dev/sandpit/internal/sandbox"
)

// A run's output files as MCP content (the spec's tool results: image content, embedded
// resources and resource links), each named by a URI that resources/read answers.

// fileURIPrefix begins the URI of an output file: sandpit://executions/{id}/files/{name}.
const fileURIPrefix = "sandpit://executions/"

// fileURITemplate is the resource template of output files ({+name}: the name's "/" stay).
const fileURITemplate = fileURIPrefix + "{id}/files/{+name}"

const fileResourceDoc = `An output file of one of your runs (a file its code wrote in its working directory, or a chart it drew), as run_code and run_saved_code list it. Kept as long as the run's record, within the daemon's quota for files.`

// What a tool result carries whole; any other output file is a resource link, read with
// resources/read. A model reads what it is given: an image costs it a picture, an embedded
// text its whole length.
const (
	// MaxImageBytes is the largest image (PNG, JPEG, GIF, WebP) given as image content.
	MaxImageBytes = 1 << 20
	// MaxEmbeddedBytes is the largest other file given as an embedded resource.
	MaxEmbeddedBytes = 64 << 10
	// MaxResultFileBytes caps the bytes of all the images and embedded files of one result;
	// the files past it, in name order, are links.
	MaxResultFileBytes = 4 << 20
)

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

// fileContents are the output files of execution id as tool result content, inline holding
// the bytes the answer carried (by name): an image of at most MaxImageBytes as image content
// after a text caption naming it,
// another file of at most MaxEmbeddedBytes as an embedded resource (text for text/* in UTF-8,
// else a blob), while their bytes together stay within MaxResultFileBytes; every other file
// (or one whose bytes the answer did not carry) as a resource link to its URI.
func fileContents(id string, files []apitype.File, inline map[string][]byte) []mcp.Content {
	var out []mcp.Content
	budget := int64(MaxResultFileBytes)
	for _, f := range files {
		uri := FileURI(id, f.Name)
		content, ok := inline[f.Name]
		mt, image := sandbox.RasterImage(f.MediaType)
		limit := int64(MaxEmbeddedBytes)
		if image {
			limit = MaxImageBytes
		}
		switch {
		case !ok || f.SizeBytes > limit || f.SizeBytes > budget:
			size := f.SizeBytes
			out = append(out, &mcp.ResourceLink{URI: uri, Name: f.Name, MIMEType: f.MediaType, Size: &size,
				Description: fmt.Sprintf("output file %s of execution %s (%d bytes): read it with resources/read", f.Name, id, f.SizeBytes)})
			continue
		case image:
			// Image content has no name: a caption before it says which file it is.
			out = append(out, &mcp.TextContent{Text: fmt.Sprintf("%s (%s, %d bytes):", f.Name, mt, f.SizeBytes)},
				&mcp.ImageContent{Data: content, MIMEType: mt})
		default:
			out = append(out, &mcp.EmbeddedResource{Resource: resourceContents(uri, f, content)})
		}
		budget -= f.SizeBytes
	}
	return out
}

// resourceContents are the contents of output file f at uri: its text for text/* in UTF-8,
// else its bytes as a blob.
func resourceContents(uri string, f apitype.File, content []byte) *mcp.ResourceContents {
	rc := &mcp.ResourceContents{URI: uri, MIMEType: f.MediaType}
	if mt, _ := sandbox.RasterImage(f.MediaType); strings.HasPrefix(mt, "text/") && utf8.Valid(content) {
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
	if errors.Is(err, errclass.NotFound) {
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
		if errors.Is(err, errclass.NotFound) {
			return nil, mcp.ResourceNotFoundError(uri)
		}
		if err != nil {
			return nil, toolError(err)
		}
		return &mcp.ReadResourceResult{Contents: []*mcp.ResourceContents{resourceContents(uri, f, content)}}, nil
	}
	return nil, mcp.ResourceNotFoundError(uri)
}
