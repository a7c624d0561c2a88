-- Which daemon ran each execution and claimed each fire, and the daemons sharing the database
-- with their last heartbeat. A daemon that starts again finalises its own rows left running;
-- on PostgreSQL another daemon does once the dead one's heartbeat is older than its lease. With
-- SQLite there is one daemon per database; the columns keep both schemas alike.

-- +goose Up
ALTER TABLE executions ADD COLUMN daemon TEXT;
ALTER TABLE job_fires ADD COLUMN daemon TEXT;
CREATE INDEX job_fires_started ON job_fires (job_id) WHERE status = 'started';
CREATE INDEX job_fires_by_execution ON job_fires (execution_id) WHERE execution_id IS NOT NULL;
CREATE TABLE daemons (
    id           TEXT PRIMARY KEY,
    address      TEXT NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL
);

-- +goose Down
DROP TABLE daemons;
DROP INDEX job_fires_by_execution;
DROP INDEX job_fires_started;
ALTER TABLE job_fires DROP COLUMN daemon;
ALTER TABLE executions DROP COLUMN daemon;
