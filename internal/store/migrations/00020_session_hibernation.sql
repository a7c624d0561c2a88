-- Paused and hibernated sessions. A hibernated session is open (ended_at NULL) with no
-- container: its files are in its daemon's data directory, and it outlives the daemon.
-- hibernated_at is set while it is hibernated; a daemon that starts ends the other open
-- sessions it left (daemon_stopped) and keeps these.

-- +goose Up
ALTER TABLE sessions ADD COLUMN hibernated_at INTEGER;

-- +goose Down
ALTER TABLE sessions DROP COLUMN hibernated_at;
