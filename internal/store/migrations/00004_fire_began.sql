-- Whether a fire's execution reached the ledger: recovery after a crash fails only the fires
-- whose run never began, even when the ledger has since pruned the execution's record.

-- +goose Up
ALTER TABLE job_fires ADD COLUMN began INTEGER NOT NULL DEFAULT 0;
UPDATE job_fires SET began = 1 WHERE execution_id IN (SELECT id FROM executions);

-- +goose Down
ALTER TABLE job_fires DROP COLUMN began;
