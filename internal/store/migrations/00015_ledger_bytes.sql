-- What each execution record takes, in bytes (ledger_max_bytes): the row and its index entries
-- (512), its code (counted per record, though records of the same code share it), input,
-- stdout, stderr, OUTPUT, reason and JSON lists, its log lines (64 each plus the message) and
-- its kept output files as files_max_bytes charges them. Written when the record is (Begin,
-- Finish), so that pruning the ledger down to its byte budget sums this narrow table and walks
-- the oldest records instead of reading every record. A table beside executions rather than a
-- column of it: filling a new column would rewrite every record, with its megabytes of output,
-- through the write-ahead log. octet_length reads the sizes from the records' headers.

-- +goose Up
CREATE TABLE execution_bytes (
    execution_id TEXT PRIMARY KEY REFERENCES executions (id) ON DELETE CASCADE,
    bytes        INTEGER NOT NULL
) WITHOUT ROWID;

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
