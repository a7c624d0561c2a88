-- The first schema: the execution ledger, saved code with its versions, jobs and their fires.
-- Times are Unix milliseconds (UTC); JSON values are stored as their text.

-- +goose Up
CREATE TABLE code_blobs (
    sha256 TEXT PRIMARY KEY,
    code   TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE executions (
    id               TEXT PRIMARY KEY,
    agent            TEXT NOT NULL,
    source           TEXT NOT NULL,
    job_id           TEXT,
    code_name        TEXT,
    code_version     INTEGER,
    code_sha256      TEXT NOT NULL,
    input            TEXT NOT NULL,
    timeout_ms       INTEGER NOT NULL,
    status           TEXT NOT NULL CHECK (status IN ('running', 'finished')),
    outcome          TEXT,
    exit_code        INTEGER,
    signal           INTEGER,
    reason           TEXT,
    stdout           TEXT,
    stderr           TEXT,
    stdout_truncated INTEGER,
    stderr_truncated INTEGER,
    output           TEXT,
    duration_ms      INTEGER,
    started_at       INTEGER NOT NULL,
    ended_at         INTEGER
);
CREATE INDEX executions_by_time ON executions (started_at DESC, id DESC);
CREATE INDEX executions_by_agent ON executions (agent, started_at DESC, id DESC);
CREATE INDEX executions_by_job ON executions (job_id, started_at DESC) WHERE job_id IS NOT NULL;
CREATE INDEX executions_running ON executions (status) WHERE status = 'running';
CREATE INDEX executions_by_code ON executions (code_sha256);

CREATE TABLE code (
    agent      TEXT NOT NULL,
    name       TEXT NOT NULL,
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (agent, name)
) WITHOUT ROWID;

CREATE TABLE code_versions (
    agent         TEXT NOT NULL,
    name          TEXT NOT NULL,
    version       INTEGER NOT NULL,
    code          TEXT NOT NULL,
    dependencies  TEXT NOT NULL,
    input_schema  TEXT,
    output_schema TEXT,
    description   TEXT NOT NULL,
    created_at    INTEGER NOT NULL,
    PRIMARY KEY (agent, name, version),
    FOREIGN KEY (agent, name) REFERENCES code (agent, name) ON DELETE CASCADE
) WITHOUT ROWID;

CREATE TABLE jobs (
    id           TEXT PRIMARY KEY,
    agent        TEXT NOT NULL,
    code_name    TEXT NOT NULL,
    code_version INTEGER NOT NULL,
    schedule     TEXT NOT NULL,
    timezone     TEXT NOT NULL,
    input        TEXT NOT NULL,
    timeout_ms   INTEGER,
    enabled      INTEGER NOT NULL,
    overlap      TEXT NOT NULL,
    catch_up     TEXT NOT NULL,
    description  TEXT NOT NULL,
    next_run_at  INTEGER,
    created_at   INTEGER NOT NULL,
    updated_at   INTEGER NOT NULL
);
CREATE INDEX jobs_due ON jobs (next_run_at) WHERE enabled = 1;
CREATE INDEX jobs_by_agent ON jobs (agent, id);
CREATE INDEX jobs_by_code ON jobs (agent, code_name);

CREATE TABLE job_fires (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id       TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    agent        TEXT NOT NULL,
    kind         TEXT NOT NULL,
    status       TEXT NOT NULL,
    scheduled_at INTEGER NOT NULL,
    fired_at     INTEGER NOT NULL,
    missed       INTEGER NOT NULL DEFAULT 0,
    execution_id TEXT,
    reason       TEXT NOT NULL DEFAULT ''
);
CREATE INDEX job_fires_by_job ON job_fires (job_id, id DESC);
CREATE INDEX job_fires_queued ON job_fires (status) WHERE status = 'queued';

-- +goose Down
DROP TABLE job_fires;
DROP TABLE jobs;
DROP TABLE code_versions;
DROP TABLE code;
DROP TABLE executions;
DROP TABLE code_blobs;
