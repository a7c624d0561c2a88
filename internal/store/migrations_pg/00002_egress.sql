-- Runs' outbound connections under network "allowlist" (SQLite migration 12): egress is the
-- JSON text of a list of connections (NULL when the run asked for none), egress_omitted how
-- many more were left out past the cap on records.

-- +goose Up
ALTER TABLE executions ADD COLUMN egress TEXT;
ALTER TABLE executions ADD COLUMN egress_omitted BIGINT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE executions DROP COLUMN egress_omitted;
ALTER TABLE executions DROP COLUMN egress;
