package store

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Code is one version of an agent's saved code. The API answers it as apitype.Code.
type Code struct {
	Agent string
	// Name is the code's name within its agent.
	Name string
	// Version counts the code's saves, from 1.
	Version int
	// Code is the Python source.
	Code string
	// Dependencies are PEP 508 requirement strings.
	Dependencies []string
	// InputSchema and OutputSchema are JSON Schemas (2020-12), null when there is none.
	InputSchema  json.RawMessage
	OutputSchema json.RawMessage
	Description  string
	// Template names the template whose sandbox runs this version ("": the daemon's image).
	Template string
	// CreatedAt is when version 1 was saved; UpdatedAt when this version was.
	CreatedAt time.Time
	UpdatedAt time.Time
}

// CodeVersion describes one version in a code's history.
type CodeVersion struct {
	Version     int
	Description string
	CodeSHA256  string
	// Template names the template whose sandbox runs this version ("": the daemon's image).
	Template  string
	CreatedAt time.Time
}

// CreateCode saves c as version 1 of a new code (c.Version and the times are set by the store).
// It returns ErrExists (wrapped) when the agent has code of that name.
func (s *Store) CreateCode(ctx context.Context, c Code) (Code, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	c.Version, c.CreatedAt, c.UpdatedAt = 1, now, now
	err := s.tx(ctx, func(tx *Tx) error {
		r, err := tx.ExecContext(ctx, `INSERT INTO code (agent, name, version, created_at) VALUES (?, ?, 1, ?)
			ON CONFLICT DO NOTHING`, c.Agent, c.Name, now.UnixMilli())
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return fmt.Errorf("code %q: %w; update it instead (PUT), or choose another name", c.Name, ErrExists)
		}
		return insertVersion(ctx, tx, c)
	})
	return c, err
}

// UpdateCode saves c as the next version of existing code. When expected is not 0 and the
// current version differs, it returns a *VersionConflictError and saves nothing.
func (s *Store) UpdateCode(ctx context.Context, c Code, expected int) (Code, error) {
	now := s.now().UTC().Truncate(time.Millisecond)
	err := s.tx(ctx, func(tx *Tx) error {
		var current int
		var created int64
		err := tx.QueryRowContext(ctx, `SELECT version, created_at FROM code WHERE agent = ? AND name = ?`,
			c.Agent, c.Name).Scan(&current, &created)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("code %q: %w", c.Name, ErrNotFound)
		}
		if err != nil {
			return err
		}
		if expected != 0 && expected != current {
			return &VersionConflictError{Expected: expected, Current: current}
		}
		c.Version, c.CreatedAt, c.UpdatedAt = current+1, time.UnixMilli(created).UTC(), now
		if _, err := tx.ExecContext(ctx, `UPDATE code SET version = ? WHERE agent = ? AND name = ?`,
			c.Version, c.Agent, c.Name); err != nil {
			return err
		}
		return insertVersion(ctx, tx, c)
	})
	return c, err
}

func insertVersion(ctx context.Context, tx *Tx, c Code) error {
	deps, err := json.Marshal(nonNil(c.Dependencies))
	if err != nil {
		return err
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO code_versions
		(agent, name, version, code, dependencies, input_schema, output_schema, description, template, created_at)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`, c.Agent, c.Name, c.Version, c.Code, string(deps),
		jsonText(c.InputSchema), jsonText(c.OutputSchema), c.Description, nullString(c.Template), c.UpdatedAt.UnixMilli())
	return err
}

// GetCode returns version of the agent's code name; version 0 means the latest.
func (s *Store) GetCode(ctx context.Context, agent, name string, version int) (Code, error) {
	q := `SELECT v.agent, v.name, v.version, v.code, v.dependencies, v.input_schema, v.output_schema,
		v.description, v.template, c.created_at, v.created_at FROM code c JOIN code_versions v
		ON v.agent = c.agent AND v.name = c.name AND v.version = `
	args := []any{agent, name}
	if version == 0 {
		q += "c.version"
	} else {
		q += "?"
		args = []any{version, agent, name}
	}
	q += " WHERE c.agent = ? AND c.name = ?"
	c, err := scanCode(s.r.QueryRowContext(ctx, q, args...))
	if errors.Is(err, sql.ErrNoRows) {
		if version == 0 {
			return Code{}, fmt.Errorf("code %q: %w", name, ErrNotFound)
		}
		return Code{}, fmt.Errorf("code %q version %d: %w", name, version, ErrNotFound)
	}
	return c, err
}

// ListCode returns the latest version of each of the agent's code whose name or description
// contains filter (case-insensitive; "" matches all), by name, a page at a time.
func (s *Store) ListCode(ctx context.Context, agent, filter string, p Page) ([]Code, string, error) {
	q := `SELECT v.agent, v.name, v.version, v.code, v.dependencies, v.input_schema, v.output_schema,
		v.description, v.template, c.created_at, v.created_at FROM code c JOIN code_versions v
		ON v.agent = c.agent AND v.name = c.name AND v.version = c.version WHERE c.agent = ?`
	args := []any{agent}
	if filter != "" {
		instr := "instr(%s, lower(?)) > 0"
		if s.pg {
			instr = "strpos(%s, lower(?)) > 0"
		}
		q += ` AND (` + fmt.Sprintf(instr, "lower(c.name)") + ` OR ` + fmt.Sprintf(instr, "lower(v.description)") + `)`
		args = append(args, filter, filter)
	}
	if p.Cursor != "" {
		after, err := decodeNameCursor(p.Cursor)
		if err != nil {
			return nil, "", err
		}
		q += " AND c.name > ?"
		args = append(args, after)
	}
	limit := p.limit()
	q += " ORDER BY c.name LIMIT ?"
	args = append(args, limit+1)
	rows, err := s.r.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	list := []Code{}
	for rows.Next() {
		c, err := scanCode(rows)
		if err != nil {
			return nil, "", err
		}
		list = append(list, c)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	next := ""
	if len(list) > limit {
		list = list[:limit]
		next = encodeNameCursor(list[limit-1].Name)
	}
	return list, next, nil
}

// ListCodeVersions returns the history of the agent's code name, newest first.
func (s *Store) ListCodeVersions(ctx context.Context, agent, name string) ([]CodeVersion, error) {
	rows, err := s.r.QueryContext(ctx, `SELECT version, description, code, template, created_at FROM code_versions
		WHERE agent = ? AND name = ? ORDER BY version DESC`, agent, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	list := []CodeVersion{}
	for rows.Next() {
		var v CodeVersion
		var code string
		var tmpl sql.NullString
		var created int64
		if err := rows.Scan(&v.Version, &v.Description, &code, &tmpl, &created); err != nil {
			return nil, err
		}
		v.CodeSHA256, v.Template, v.CreatedAt = CodeSHA256(code), tmpl.String, time.UnixMilli(created).UTC()
		list = append(list, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(list) == 0 {
		return nil, fmt.Errorf("code %q: %w", name, ErrNotFound)
	}
	return list, nil
}

// DeleteCode deletes the agent's code name with every version. When enabled or disabled jobs
// use it, it returns an *InUseError unless force is set; with force those jobs are disabled
// (and keep pointing at the name) and their IDs returned.
func (s *Store) DeleteCode(ctx context.Context, agent, name string, force bool) ([]string, error) {
	var jobs []string
	err := s.tx(ctx, func(tx *Tx) error {
		rows, err := tx.QueryContext(ctx, `SELECT id FROM jobs WHERE agent = ? AND code_name = ? ORDER BY id`, agent, name)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id string
			if err := rows.Scan(&id); err != nil {
				rows.Close()
				return err
			}
			jobs = append(jobs, id)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		if len(jobs) > 0 && !force {
			return &InUseError{Jobs: jobs}
		}
		r, err := tx.ExecContext(ctx, `DELETE FROM code WHERE agent = ? AND name = ?`, agent, name)
		if err != nil {
			return err
		}
		if n, _ := r.RowsAffected(); n == 0 {
			return fmt.Errorf("code %q: %w", name, ErrNotFound)
		}
		_, err = tx.ExecContext(ctx, `UPDATE jobs SET enabled = 0, next_run_at = NULL, updated_at = ?
			WHERE agent = ? AND code_name = ?`, s.now().UnixMilli(), agent, name)
		return err
	})
	return jobs, err
}

type scanner interface{ Scan(dest ...any) error }

func scanCode(row scanner) (Code, error) {
	var (
		c                   Code
		deps                string
		inSchema, outSchema sql.NullString
		tmpl                sql.NullString
		created, updated    int64
	)
	if err := row.Scan(&c.Agent, &c.Name, &c.Version, &c.Code, &deps, &inSchema, &outSchema,
		&c.Description, &tmpl, &created, &updated); err != nil {
		return Code{}, err
	}
	if err := json.Unmarshal([]byte(deps), &c.Dependencies); err != nil {
		return Code{}, fmt.Errorf("code %q: stored dependencies are not a JSON list: %w", c.Name, err)
	}
	c.InputSchema, c.OutputSchema, c.Template = rawOrNull(inSchema), rawOrNull(outSchema), tmpl.String
	c.CreatedAt, c.UpdatedAt = time.UnixMilli(created).UTC(), time.UnixMilli(updated).UTC()
	return c, nil
}

func encodeNameCursor(name string) string { return encodeCursor(0, name) }

func decodeNameCursor(c string) (string, error) {
	_, name, err := decodeCursor(c)
	return name, err
}

// jsonText stores a JSON value's text; absent and null are NULL.
func jsonText(v json.RawMessage) sql.NullString {
	t := strings.TrimSpace(string(v))
	if t == "" || t == "null" {
		return sql.NullString{}
	}
	return sql.NullString{String: t, Valid: true}
}

func rawOrNull(v sql.NullString) json.RawMessage {
	if !v.Valid {
		return json.RawMessage("null")
	}
	return json.RawMessage(v.String)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
