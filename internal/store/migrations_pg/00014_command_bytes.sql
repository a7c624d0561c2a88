-- A session's commands count in the ledger's byte budget, as SQLite's migration 23.

-- +goose Up
ALTER TABLE session_commands ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE session_commands SET bytes = 256 + octet_length(id) + octet_length(session_id)
    + octet_length(agent) + octet_length(command) + octet_length(info);
CREATE INDEX session_commands_by_agent ON session_commands (agent, started_at, id);

-- +goose Down
DROP INDEX session_commands_by_agent;
ALTER TABLE session_commands DROP COLUMN bytes;
