-- The template whose sandbox ran each execution (Origin.Template, as its session names it,
-- and the version the session started from); NULL for the daemon's own image.

-- +goose Up
ALTER TABLE executions ADD COLUMN template TEXT;
ALTER TABLE executions ADD COLUMN template_version INTEGER;
CREATE INDEX executions_by_template ON executions (template, started_at DESC) WHERE template IS NOT NULL;

-- +goose Down
DROP INDEX executions_by_template;
ALTER TABLE executions DROP COLUMN template_version;
ALTER TABLE executions DROP COLUMN template;
