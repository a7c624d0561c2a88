-- What each execution record takes, in bytes (ledger_max_bytes), as SQLite's migration 15: the
-- row (512), its code, input, outputs and JSON lists, its log lines (64 each plus the message)
-- and its kept output files as files_max_bytes charges them, in a narrow table that pruning
-- sums and walks oldest first. octet_length reads a TOASTed value's size without its bytes.

-- +goose Up
CREATE TABLE execution_bytes (
    execution_id TEXT PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
    bytes        BIGINT NOT NULL
);

INSERT INTO execution_bytes (execution_id, bytes)
SELECT e.id, 512 + coalesce(octet_length(e.input), 0)
    + coalesce(octet_length(e.stdout), 0) + coalesce(octet_length(e.stderr), 0)
    + coalesce(octet_length(e.output), 0) + coalesce(octet_length(e.reason), 0)
    + coalesce(octet_length(e.dependencies), 0) + coalesce(octet_length(e.calls), 0)
    + coalesce(octet_length(e.files), 0) + coalesce(octet_length(e.files_skipped), 0)
    + coalesce(octet_length(e.egress), 0)
    + coalesce((SELECT octet_length(b.code) FROM code_blobs b WHERE b.sha256 = e.code_sha256), 0)
    + coalesce((SELECT sum(64 + octet_length(l.message)) FROM execution_logs l WHERE l.execution_id = e.id), 0)
    + coalesce((SELECT sum((f.size_bytes + 4095) / 4096 * 4096 + 4096) FROM execution_files f WHERE f.execution_id = e.id), 0)
FROM executions e;

-- +goose Down
DROP TABLE execution_bytes;
