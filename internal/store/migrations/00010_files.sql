-- Runs' input and output files. An execution's record lists its output files (files: a JSON
-- list of {name, size_bytes, media_type, sha256}), those not collected (files_skipped: a JSON
-- list of {name, reason}) and whether more were left out (files_truncated). The bytes of each
-- kept file are in the data directory, at files/<execution id>/<idx>; execution_files says
-- which are there (a file the record lists that has no row here was evicted by the quota
-- files_max_bytes). A job's input files are kept with it in job_files and handed to each fire,
-- with its chart setting.

-- +goose Up
ALTER TABLE executions ADD COLUMN files TEXT;
ALTER TABLE executions ADD COLUMN files_skipped TEXT;
ALTER TABLE executions ADD COLUMN files_truncated INTEGER NOT NULL DEFAULT 0;

CREATE TABLE execution_files (
    execution_id TEXT NOT NULL,
    name         TEXT NOT NULL,
    idx          INTEGER NOT NULL,
    size_bytes   INTEGER NOT NULL,
    PRIMARY KEY (execution_id, name)
) WITHOUT ROWID;

CREATE TABLE job_files (
    job_id   TEXT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    position INTEGER NOT NULL,
    name     TEXT NOT NULL,
    content  BLOB NOT NULL,
    PRIMARY KEY (job_id, position)
) WITHOUT ROWID;

-- A job's chart setting: NULL for the daemon's (charts), else 0 or 1.
ALTER TABLE jobs ADD COLUMN charts INTEGER;

-- +goose Down
ALTER TABLE jobs DROP COLUMN charts;
DROP TABLE job_files;
DROP TABLE execution_files;
ALTER TABLE executions DROP COLUMN files_truncated;
ALTER TABLE executions DROP COLUMN files_skipped;
ALTER TABLE executions DROP COLUMN files;
