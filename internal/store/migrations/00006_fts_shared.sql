-- One full-text index per kind again (an index per agent made each new agent slower than the
-- last). Matching uses the shared index, filtered by agent; ranking is BM25 computed by the
-- store from the agent's own rows (see rank.go), so scores still reveal nothing of other
-- agents. The per-agent tables of migration 5 are dropped by the store when it opens.

-- +goose Up
ALTER TABLE memories ADD COLUMN tokens INTEGER NOT NULL DEFAULT -1;
ALTER TABLE documents ADD COLUMN tokens INTEGER NOT NULL DEFAULT -1;
-- Rows still to count (stored before this migration): the store finds them at start-up
-- without scanning every row.
CREATE INDEX memories_untokenized ON memories (id) WHERE tokens < 0;
CREATE INDEX documents_untokenized ON documents (rid) WHERE tokens < 0;
CREATE VIRTUAL TABLE memories_fts USING fts5 (text, content = 'memories', content_rowid = 'id');
CREATE VIRTUAL TABLE documents_fts USING fts5 (title, content, content = 'documents', content_rowid = 'rid');
INSERT INTO memories_fts (memories_fts) VALUES ('rebuild');
INSERT INTO documents_fts (documents_fts) VALUES ('rebuild');
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
CREATE TRIGGER documents_au AFTER UPDATE OF title, content ON documents BEGIN
    INSERT INTO documents_fts (documents_fts, rowid, title, content) VALUES ('delete', old.rid, old.title, old.content);
    INSERT INTO documents_fts (rowid, title, content) VALUES (new.rid, new.title, new.content);
END;
-- +goose StatementEnd

-- +goose Down
DROP TRIGGER documents_au;
DROP TRIGGER documents_ad;
DROP TRIGGER documents_ai;
DROP TRIGGER memories_ad;
DROP TRIGGER memories_ai;
DROP TABLE documents_fts;
DROP TABLE memories_fts;
DROP INDEX documents_untokenized;
DROP INDEX memories_untokenized;
ALTER TABLE documents DROP COLUMN tokens;
ALTER TABLE memories DROP COLUMN tokens;
