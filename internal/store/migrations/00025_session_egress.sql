-- The outbound connections of a session's commands and of what its calls left running
-- (network "allowlist"), one row as each ends; a call's own are in its execution's egress.
-- Pruned as port_requests are (the executions' age and count).

-- +goose Up
CREATE TABLE session_egress (
    id             TEXT PRIMARY KEY,
    session_id     TEXT NOT NULL,
    agent          TEXT NOT NULL,
    started_at     BIGINT NOT NULL,
    record         TEXT NOT NULL
);
CREATE INDEX session_egress_session ON session_egress (session_id, started_at);
CREATE INDEX session_egress_started ON session_egress (started_at);

-- +goose Down
DROP TABLE session_egress;
