-- The ledger's byte budget (ledger_max_bytes) is shared fairly between agents and counts job
-- fires. execution_bytes records each record's agent, so that pruning sums the bytes of each
-- agent from this narrow table; each job fire records what its row takes (fireBytes in
-- jobs.go): a fire that started a run counts in that run's record, one that started none
-- (skipped, missed, failed) counts on its own, and goes with the ledger.

-- +goose Up
ALTER TABLE execution_bytes ADD COLUMN agent TEXT NOT NULL DEFAULT '';
UPDATE execution_bytes SET agent = coalesce((SELECT e.agent FROM executions e WHERE e.id = execution_bytes.execution_id), '');
CREATE INDEX execution_bytes_by_agent ON execution_bytes (agent, bytes);
ALTER TABLE job_fires ADD COLUMN bytes INTEGER NOT NULL DEFAULT 0;
UPDATE job_fires SET bytes = 160 + length(CAST(job_id AS BLOB)) + length(CAST(agent AS BLOB)) + length(CAST(kind AS BLOB))
    + length(CAST(status AS BLOB)) + length(CAST(reason AS BLOB)) + coalesce(length(CAST(execution_id AS BLOB)), 0)
    + coalesce(length(CAST(daemon AS BLOB)), 0);
CREATE INDEX job_fires_unrun ON job_fires (agent, id) WHERE execution_id IS NULL;

-- +goose Down
DROP INDEX job_fires_unrun;
ALTER TABLE job_fires DROP COLUMN bytes;
DROP INDEX execution_bytes_by_agent;
ALTER TABLE execution_bytes DROP COLUMN agent;
