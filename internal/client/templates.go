package client

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"

	"github.com/sandpit-dev/sandpit/internal/apitype"
	"github.com/sandpit-dev/sandpit/internal/errclass"
)

// ErrTemplateBuildFailed is wrapped by the error BuildTemplate returns when the build failed
// (a step failed, or the image was too large): its text names the step and its output. It is
// of class invalid.
var ErrTemplateBuildFailed = errclass.New(errclass.Invalid, "template build failed")

// BuildTemplate builds agent's template b (POST /v1/agents/{agent}/templates), passing the
// build's events to emit as they come (nil: none), and returns the template once built. A
// request refused before its build starts is an *APIError; a failed build wraps
// ErrTemplateBuildFailed.
func (c *Client) BuildTemplate(ctx context.Context, agent string, b apitype.TemplateBuild, emit func(apitype.TemplateEvent)) (apitype.Template, error) {
	resp, err := c.send(ctx, http.MethodPost, agentPath(agent, "templates"), b, apitype.NDJSONContentType)
	if err != nil {
		return apitype.Template{}, err
	}
	defer resp.Body.Close()
	dec := json.NewDecoder(resp.Body)
	for {
		var e apitype.TemplateEvent
		if err := dec.Decode(&e); err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return apitype.Template{}, fmt.Errorf("reading the build's progress: it ended before the build did: %w", err)
		}
		if emit != nil {
			emit(e)
		}
		switch e.Type {
		case "done":
			if e.Template == nil {
				return apitype.Template{}, errors.New("the build's last event holds no template")
			}
			return *e.Template, nil
		case "error":
			return apitype.Template{}, fmt.Errorf("%w: %s", ErrTemplateBuildFailed, e.Error)
		}
	}
}

// ListTemplates returns agent's templates and the shared ones of other agents.
func (c *Client) ListTemplates(ctx context.Context, agent string) ([]apitype.Template, error) {
	var out apitype.TemplateList
	err := c.getJSON(ctx, agentPath(agent, "templates"), &out)
	return out.Templates, err
}

// GetTemplate returns agent's template name, with its build log (404: none).
func (c *Client) GetTemplate(ctx context.Context, agent, name string) (apitype.Template, error) {
	var out apitype.Template
	err := c.getJSON(ctx, agentPath(agent, "templates", name), &out)
	return out, err
}

// DeleteTemplate removes agent's template name (404: none; 409, unless force, while saved
// code names it).
func (c *Client) DeleteTemplate(ctx context.Context, agent, name string, force bool) error {
	path := agentPath(agent, "templates", name)
	if force {
		path += "?force=true"
	}
	resp, err := c.send(ctx, http.MethodDelete, path, nil, "application/json")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// TemplateVersions returns the kept versions of agent's template name, newest first (404:
// no such template).
func (c *Client) TemplateVersions(ctx context.Context, agent, name string) ([]apitype.TemplateVersion, error) {
	var out apitype.TemplateVersionList
	err := c.getJSON(ctx, agentPath(agent, "templates", name, "versions"), &out)
	return out.Versions, err
}

// DeleteTemplateVersion removes a kept version of agent's template name (404: not kept; 409:
// the current version).
func (c *Client) DeleteTemplateVersion(ctx context.Context, agent, name string, version int) error {
	resp, err := c.send(ctx, http.MethodDelete, agentPath(agent, "templates", name, "versions", strconv.Itoa(version)), nil, "application/json")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}

// TagTemplate makes tag of agent's template name name version, and returns the template with
// its tags (400: a bad tag, or a version not kept).
func (c *Client) TagTemplate(ctx context.Context, agent, name, tag string, version int) (apitype.Template, error) {
	var out apitype.Template
	err := c.call(ctx, http.MethodPut, agentPath(agent, "templates", name, "tags", tag), apitype.TemplateTag{Version: version}, &out)
	return out, err
}

// UntagTemplate removes tag of agent's template name (404: no such tag).
func (c *Client) UntagTemplate(ctx context.Context, agent, name, tag string) error {
	resp, err := c.send(ctx, http.MethodDelete, agentPath(agent, "templates", name, "tags", tag), nil, "application/json")
	if err != nil {
		return err
	}
	return resp.Body.Close()
}
