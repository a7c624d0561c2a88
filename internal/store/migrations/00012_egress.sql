-- Runs' outbound connections under network "allowlist": egress is a JSON list of
-- {host, port, address, allowed, rule, reason, bytes_sent, bytes_received, started_at,
-- duration_ms, ended} (NULL when the run asked for none), egress_omitted how many more were
-- left out past the cap on records.

-- +goose Up
ALTER TABLE executions ADD COLUMN egress TEXT;
ALTER TABLE executions ADD COLUMN egress_omitted INTEGER NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE executions DROP COLUMN egress_omitted;
ALTER TABLE executions DROP COLUMN egress;
