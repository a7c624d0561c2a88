-- Indexes that let the agent.* calls stop at their LIMIT: get_facts without a filter or with a
-- subject only, get_documents without a query and query_graph without a start, read in id order from an index instead of
-- sorting all the agent's rows first (their work no longer grows with what the agent stores).

-- +goose Up
CREATE INDEX facts_by_agent ON facts (agent, id);
CREATE INDEX facts_by_subject_id ON facts (agent, subject, id);
CREATE INDEX documents_by_agent ON documents (agent, rid);
CREATE INDEX graph_nodes_by_agent ON graph_nodes (agent, rid);

-- +goose Down
DROP INDEX graph_nodes_by_agent;
DROP INDEX documents_by_agent;
DROP INDEX facts_by_subject_id;
DROP INDEX facts_by_agent;
