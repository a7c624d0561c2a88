-- The ledger's byte budget is shared fairly between agents and counts job fires, as SQLite's
-- migration 17.

-- +goose Up
ALTER TABLE execution_bytes ADD COLUMN agent TEXT NOT NULL DEFAULT '';
UPDATE execution_bytes b SET agent = e.agent FROM executions e WHERE e.id = b.execution_id;
CREATE INDEX execution_bytes_by_agent ON execution_bytes (agent, bytes);
ALTER TABLE job_fires ADD COLUMN bytes BIGINT NOT NULL DEFAULT 0;
UPDATE job_fires SET bytes = 160 + octet_length(job_id) + octet_length(agent) + octet_length(kind)
    + octet_length(status) + octet_length(reason) + coalesce(octet_length(execution_id), 0)
    + coalesce(octet_length(daemon), 0);
CREATE INDEX job_fires_unrun ON job_fires (agent, id) WHERE execution_id IS NULL;

-- +goose Down
DROP INDEX job_fires_unrun;
ALTER TABLE job_fires DROP COLUMN bytes;
DROP INDEX execution_bytes_by_agent;
ALTER TABLE execution_bytes DROP COLUMN agent;
