package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"

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

// DeleteTemplate removes agent's template name (template.Store).
func (s *Store) DeleteTemplate(ctx context.Context, agent, name string) error {
	res, err := s.w.ExecContext(ctx, `DELETE FROM templates WHERE agent = ? AND name = ?`, agent, name)
	if err != nil {
		return err
	}
	if n, err := res.RowsAffected(); err == nil && n == 0 {
		return template.ErrNotFound
	}
	return nil
}

// CodeNamingTemplate returns, as "AGENT/NAME", the saved code (by agent and name) whose
// latest version names owner's template name: owner's own code naming it NAME or OWNER/NAME,
// and other agents' naming OWNER/NAME (template.Store).
func (s *Store) CodeNamingTemplate(ctx context.Context, owner, name string) ([]string, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT c.agent, c.name FROM code c JOIN code_versions v
		ON v.agent = c.agent AND v.name = c.name AND v.version = c.version
		WHERE (c.agent = ? AND v.template = ?) OR v.template = ? ORDER BY c.agent, c.name`,
		owner, name, owner+"/"+name)
	if err != nil {
		return nil, err
	}
	return collect(rows, func(r scanner) (string, error) {
		var agent, code string
		err := r.Scan(&agent, &code)
		return agent + "/" + code, err
	})
}

// TemplateImageUsers counts the templates whose image or layer image is image
// (template.Store).
func (s *Store) TemplateImageUsers(ctx context.Context, image string) (int, error) {
	var n int
	err := s.r.QueryRowContext(ctx, `SELECT COUNT(*) FROM templates WHERE image = ? OR layer_image = ?`, image, image).Scan(&n)
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
