-- Full-text indexes per agent instead of one for all: BM25's word statistics then come from
-- the agent's own memories and documents only, so search scores say nothing about another
-- agent's data. The per-agent indexes are created by the store as agents appear.

-- +goose Up
DROP TRIGGER memories_ai;
DROP TRIGGER memories_ad;
DROP TABLE memories_fts;
DROP TRIGGER documents_ai;
DROP TRIGGER documents_ad;
DROP TRIGGER documents_au;
DROP TABLE documents_fts;

-- +goose Down
CREATE VIRTUAL TABLE memories_fts USING fts5 (text, content = 'memories', content_rowid = 'id');
CREATE VIRTUAL TABLE documents_fts USING fts5 (title, content, content = 'documents', content_rowid = 'rid');
