-- Each stored result counts what the table and its indexes hold for it (resultBytes in
-- knowledge.go): 96 bytes of overhead, its agent three times, its key twice, its value and its
-- execution once. It counted its key and value alone, so results of a few bytes filled the
-- table to ten times results_max_bytes and more.

-- +goose Up
UPDATE results SET bytes = 96 + 3 * length(CAST(agent AS BLOB)) + 2 * length(CAST(key AS BLOB))
    + length(CAST(value AS BLOB)) + coalesce(length(CAST(execution_id AS BLOB)), 0);

-- +goose Down
UPDATE results SET bytes = length(CAST(key AS BLOB)) + length(CAST(value AS BLOB));
