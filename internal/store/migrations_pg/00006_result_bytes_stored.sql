-- Each stored result counts what the table and its indexes hold for it, as SQLite's migration
-- 16 (resultBytes in knowledge.go).

-- +goose Up
UPDATE results SET bytes = 96 + 3 * octet_length(agent) + 2 * octet_length(key)
    + octet_length(value) + coalesce(octet_length(execution_id), 0);

-- +goose Down
UPDATE results SET bytes = octet_length(key) + octet_length(value);
