-- The knowledge the callback line reads (memories, facts, a graph, documents), the results runs
-- store, the log lines runs write, and the audit of each execution's calls.

-- +goose Up
CREATE TABLE memories (
    id         INTEGER PRIMARY KEY,
    agent      TEXT NOT NULL,
    text       TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX memories_by_agent ON memories (agent, id);
CREATE VIRTUAL TABLE memories_fts USING fts5 (text, content = 'memories', content_rowid = 'id');
-- +goose StatementBegin
CREATE TRIGGER memories_ai AFTER INSERT ON memories BEGIN
    INSERT INTO memories_fts (rowid, text) VALUES (new.id, new.text);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER memories_ad AFTER DELETE ON memories BEGIN
    INSERT INTO memories_fts (memories_fts, rowid, text) VALUES ('delete', old.id, old.text);
END;
-- +goose StatementEnd

CREATE TABLE facts (
    id         INTEGER PRIMARY KEY,
    agent      TEXT NOT NULL,
    subject    TEXT NOT NULL,
    predicate  TEXT NOT NULL,
    object     TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX facts_by_subject ON facts (agent, subject, predicate);
CREATE INDEX facts_by_predicate ON facts (agent, predicate);

CREATE TABLE graph_nodes (
    rid        INTEGER PRIMARY KEY,
    agent      TEXT NOT NULL,
    id         TEXT NOT NULL,
    type       TEXT NOT NULL,
    properties TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (agent, id)
);

CREATE TABLE graph_edges (
    id         INTEGER PRIMARY KEY,
    agent      TEXT NOT NULL,
    source     TEXT NOT NULL,
    target     TEXT NOT NULL,
    relation   TEXT NOT NULL,
    properties TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX graph_edges_by_source ON graph_edges (agent, source, relation);
CREATE INDEX graph_edges_by_target ON graph_edges (agent, target, relation);

CREATE TABLE documents (
    rid        INTEGER PRIMARY KEY,
    agent      TEXT NOT NULL,
    id         TEXT NOT NULL,
    title      TEXT NOT NULL,
    content    TEXT NOT NULL,
    metadata   TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (agent, id)
);
CREATE VIRTUAL TABLE documents_fts USING fts5 (title, content, content = 'documents', content_rowid = 'rid');
-- +goose StatementBegin
CREATE TRIGGER documents_ai AFTER INSERT ON documents BEGIN
    INSERT INTO documents_fts (rowid, title, content) VALUES (new.rid, new.title, new.content);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER documents_ad AFTER DELETE ON documents BEGIN
    INSERT INTO documents_fts (documents_fts, rowid, title, content) VALUES ('delete', old.rid, old.title, old.content);
END;
-- +goose StatementEnd
-- +goose StatementBegin
CREATE TRIGGER documents_au AFTER UPDATE ON documents BEGIN
    INSERT INTO documents_fts (documents_fts, rowid, title, content) VALUES ('delete', old.rid, old.title, old.content);
    INSERT INTO documents_fts (rowid, title, content) VALUES (new.rid, new.title, new.content);
END;
-- +goose StatementEnd

CREATE TABLE results (
    id           INTEGER PRIMARY KEY,
    agent        TEXT NOT NULL,
    key          TEXT NOT NULL,
    version      INTEGER NOT NULL,
    value        TEXT NOT NULL,
    execution_id TEXT,
    created_at   INTEGER NOT NULL,
    UNIQUE (agent, key, version)
);

CREATE TABLE execution_logs (
    id           INTEGER PRIMARY KEY,
    execution_id TEXT NOT NULL,
    agent        TEXT NOT NULL,
    level        TEXT NOT NULL,
    message      TEXT NOT NULL,
    created_at   INTEGER NOT NULL
);
CREATE INDEX execution_logs_by_execution ON execution_logs (execution_id, id);

ALTER TABLE executions ADD COLUMN calls TEXT;

-- +goose Down
ALTER TABLE executions DROP COLUMN calls;
DROP TABLE execution_logs;
DROP TABLE results;
DROP TABLE documents_fts;
DROP TABLE documents;
DROP TABLE graph_edges;
DROP TABLE graph_nodes;
DROP TABLE facts;
DROP TABLE memories_fts;
DROP TABLE memories;
