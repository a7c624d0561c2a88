-- A session's commands count in the ledger's byte budget (ledger_max_bytes) and are pruned
-- with their agent's share of it, like executions: each records what its row takes
-- (commandBytes in commands.go), and an index walks an agent's commands oldest first.

-- +goose Up
ALTER TABLE session_commands ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE session_commands SET bytes = 256 + length(CAST(id AS BLOB)) + length(CAST(session_id AS BLOB))
    + length(CAST(agent AS BLOB)) + length(CAST(command AS BLOB)) + length(CAST(info AS BLOB));
CREATE INDEX session_commands_by_agent ON session_commands (agent, started_at, id);

-- +goose Down
DROP INDEX session_commands_by_agent;
ALTER TABLE session_commands DROP COLUMN bytes;
