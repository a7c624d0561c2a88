package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandpit-dev/sandpit/internal/template"
)

var _ template.Store = (*Store)(nil)

const templateColumns = `agent, name, version, spec, shared, hash, image, layer_image, size_bytes, status, error, log, created_at, updated_at`

// PutTemplate inserts or replaces the template of (t.Agent, t.Name) (template.Store).
func (s *Store) PutTemplate(ctx context.Context, t template.Template) error {
	spec, err := json.Marshal(t.Spec)
	if err != nil {
		return err
	}
	shared := 0
	if t.Shared {
		shared = 1
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO templates (`+templateColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (agent, name) DO UPDATE SET version = excluded.version, spec = excluded.spec, shared = excluded.shared,
		hash = excluded.hash, image = excluded.image, layer_image = excluded.layer_image, size_bytes = excluded.size_bytes,
		status = excluded.status, error = excluded.error, log = excluded.log, updated_at = excluded.updated_at`,
		t.Agent, t.Name, t.Version, string(spec), shared, t.Hash, t.Image, t.LayerImage, t.SizeBytes, t.Status, t.Error, t.Log,
		ms(t.CreatedAt), ms(t.UpdatedAt))
	if err != nil {
		return fmt.Errorf("storing template %q: %w", t.Name, err)
	}
	return nil
}

// GetTemplate returns agent's template name (template.Store); an error wrapping
// template.ErrNotFound when there is none.
func (s *Store) GetTemplate(ctx context.Context, agent, name string) (template.Template, error) {
	row := s.r.QueryRowContext(ctx, `SELECT `+templateColumns+` FROM templates WHERE agent = ? AND name = ?`, agent, name)
	t, err := scanTemplate(row)
	if errors.Is(err, sql.ErrNoRows) {
		return template.Template{}, template.ErrNotFound
	}
	return t, err
}

// ListTemplates returns agent's templates and the shared ones of other agents, by agent and
// name (template.Store). Build logs are left out.
func (s *Store) ListTemplates(ctx context.Context, agent string) ([]template.Template, error) {
	return s.listTemplates(ctx, `SELECT `+templateColumns+` FROM templates WHERE agent = ? OR shared = 1 ORDER BY agent, name`, agent)
}

// DeleteTemplate removes agent's template name, its kept versions and its tags
// (template.Store).
func (s *Store) DeleteTemplate(ctx context.Context, agent, name string) error {
	return s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM templates WHERE agent = ? AND name = ?`, agent, name)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return template.ErrNotFound
		}
		if _, err := tx.ExecContext(ctx, `DELETE FROM template_versions WHERE agent = ? AND name = ?`, agent, name); err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM template_tags WHERE agent = ? AND name = ?`, agent, name)
		return err
	})
}

const templateVersionColumns = `version, spec, hash, image, layer_image, size_bytes, shared, created_at`

// PutTemplateVersion keeps v as a version of agent's template name, replacing one of the same
// number (template.Store).
func (s *Store) PutTemplateVersion(ctx context.Context, agent, name string, v template.Version) error {
	spec, err := json.Marshal(v.Spec)
	if err != nil {
		return err
	}
	shared := 0
	if v.Shared {
		shared = 1
	}
	_, err = s.w.ExecContext(ctx, `INSERT INTO template_versions (agent, name, `+templateVersionColumns+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (agent, name, version) DO UPDATE SET spec = excluded.spec, hash = excluded.hash, image = excluded.image,
		layer_image = excluded.layer_image, size_bytes = excluded.size_bytes, shared = excluded.shared`,
		agent, name, v.Version, string(spec), v.Hash, v.Image, v.LayerImage, v.SizeBytes, shared, ms(v.CreatedAt))
	if err != nil {
		return fmt.Errorf("storing version %d of template %q: %w", v.Version, name, err)
	}
	return nil
}

// TemplateVersions returns the kept versions of agent's template name, newest first, each
// with its tags (template.Store). Current is left to the caller.
func (s *Store) TemplateVersions(ctx context.Context, agent, name string) ([]template.Version, error) {
	tags, err := s.TemplateTags(ctx, agent, name)
	if err != nil {
		return nil, err
	}
	rows, err := s.r.QueryContext(ctx, `SELECT `+templateVersionColumns+` FROM template_versions
		WHERE agent = ? AND name = ? ORDER BY version DESC`, agent, name)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (template.Version, error) {
		var (
			v       template.Version
			spec    string
			shared  int
			created sql.NullInt64
		)
		if err := r.Scan(&v.Version, &spec, &v.Hash, &v.Image, &v.LayerImage, &v.SizeBytes, &shared, &created); err != nil {
			return v, err
		}
		v.Shared = shared != 0
		if err := json.Unmarshal([]byte(spec), &v.Spec); err != nil {
			return v, fmt.Errorf("version %d of template %q has an unreadable spec: %w", v.Version, name, err)
		}
		v.CreatedAt = fromMS(created)
		for tag, n := range tags {
			if n == v.Version {
				v.Tags = append(v.Tags, tag)
			}
		}
		slices.Sort(v.Tags)
		return v, nil
	})
}

// DeleteTemplateVersion removes a kept version of agent's template name and the tags naming
// it (template.Store); an error wrapping template.ErrNotFound when it is not kept.
func (s *Store) DeleteTemplateVersion(ctx context.Context, agent, name string, version int) error {
	return s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM template_versions WHERE agent = ? AND name = ? AND version = ?`, agent, name, version)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return template.ErrNotFound
		}
		_, err = tx.ExecContext(ctx, `DELETE FROM template_tags WHERE agent = ? AND name = ? AND version = ?`, agent, name, version)
		return err
	})
}

// TemplateTags returns the tags of agent's template name, each with the version it names
// (template.Store).
func (s *Store) TemplateTags(ctx context.Context, agent, name string) (map[string]int, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT tag, version FROM template_tags WHERE agent = ? AND name = ?`, agent, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	tags := map[string]int{}
	for rows.Next() {
		var (
			tag string
			v   int
		)
		if err := rows.Scan(&tag, &v); err != nil {
			return nil, err
		}
		tags[tag] = v
	}
	return tags, rows.Err()
}

// SetTemplateTag makes tag of agent's template name name version (template.Store); an error
// wrapping template.ErrNotFound when the version is not kept (a build or a removal may have
// just taken it: the check and the write are one statement, in a transaction that is
// serializable on PostgreSQL; a new helper's race of tags against removals left tags naming
// nothing, and tags of removed templates that a new one of the name inherited).
func (s *Store) SetTemplateTag(ctx context.Context, agent, name, tag string, version int) error {
	return s.tx(ctx, func(tx *Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO template_tags (agent, name, tag, version, updated_at)
			SELECT ?, ?, ?, ?, ? WHERE EXISTS (SELECT 1 FROM template_versions WHERE agent = ? AND name = ? AND version = ?)
			ON CONFLICT (agent, name, tag) DO UPDATE SET version = excluded.version, updated_at = excluded.updated_at`,
			agent, name, tag, version, ms(time.Now()), agent, name, version)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err == nil && n == 0 {
			return fmt.Errorf("version %d of template %q is not kept: %w", version, name, template.ErrNotFound)
		}
		return nil
	})
}

// DeleteTemplateTag removes tag of agent's template name (template.Store); an error wrapping
// template.ErrNotFound when it has no such tag.
func (s *Store) DeleteTemplateTag(ctx context.Context, agent, name, tag string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM template_tags WHERE agent = ? AND name = ? AND tag = ?`, agent, name, tag)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return template.ErrNotFound
	}
	return nil
}

// CodeNamingTemplate returns, as "AGENT/NAME", the saved code (by agent and name) whose
// latest version names owner's template name, or one of its versions or tags: owner's own
// code naming it NAME[:…] or OWNER/NAME[:…], and other agents' naming OWNER/NAME[:…]
// (template.Store).
func (s *Store) CodeNamingTemplate(ctx context.Context, owner, name string) ([]string, error) {
	full := owner + "/" + name
	rows, err := s.r.QueryContext(ctx, `SELECT c.agent, c.name FROM code c JOIN code_versions v
		ON v.agent = c.agent AND v.name = c.name AND v.version = c.version
		WHERE (c.agent = ? AND (v.template = ? OR substr(v.template, 1, ?) = ?)) OR v.template = ? OR substr(v.template, 1, ?) = ?
		ORDER BY c.agent, c.name`,
		owner, name, len(name)+1, name+":", full, len(full)+1, full+":")
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (string, error) {
		var agent, code string
		err := r.Scan(&agent, &code)
		return agent + "/" + code, err
	})
}

// TemplateImageUsers counts the templates and kept versions whose image or layer image is
// image (template.Store).
func (s *Store) TemplateImageUsers(ctx context.Context, image string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT (SELECT COUNT(*) FROM templates WHERE image = ? OR layer_image = ?)
		+ (SELECT COUNT(*) FROM template_versions WHERE image = ? OR layer_image = ?)`, image, image, image, image).Scan(&n)
	return n, err
}

func scanTemplate(row interface{ Scan(...any) error }) (template.Template, error) {
	var (
		t                template.Template
		spec             string
		shared           int
		created, updated sql.NullInt64
	)
	if err := row.Scan(&t.Agent, &t.Name, &t.Version, &spec, &shared, &t.Hash, &t.Image, &t.LayerImage, &t.SizeBytes,
		&t.Status, &t.Error, &t.Log, &created, &updated); err != nil {
		return template.Template{}, err
	}
	if err := json.Unmarshal([]byte(spec), &t.Spec); err != nil {
		return template.Template{}, fmt.Errorf("template %q has an unreadable spec: %w", t.Name, err)
	}
	t.Shared, t.CreatedAt, t.UpdatedAt = shared != 0, fromMS(created), fromMS(updated)
	return t, nil
}

// AllTemplates returns every agent's templates, by agent and name, without build logs.
func (s *Store) AllTemplates(ctx context.Context) ([]template.Template, error) {
	return s.listTemplates(ctx, `SELECT `+templateColumns+` FROM templates ORDER BY agent, name`)
}

// listTemplates returns the templates query selects (templateColumns), without build logs.
func (s *Store) listTemplates(ctx context.Context, query string, args ...any) ([]template.Template, error) {
	rows, err := s.r.QueryContext(ctx, query, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []template.Template
	for rows.Next() {
		t, err := scanTemplate(rows)
		if err != nil {
			return nil, err
		}
		t.Log = ""
		out = append(out, t)
	}
	return out, rows.Err()
}
