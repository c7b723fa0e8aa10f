-- +goose Up
-- Ingestion writes a run once (twice when its record and results come far apart), and every
-- index of runs and completions is part of what each fire costs. Two indexes held a row per run
-- for queries that need far less:
-- runs_status_seq served only the log list's status filter. Running runs have runs_running;
-- failed ones (failure, timeout, kill) get this partial index, which successful runs, the bulk,
-- never enter; a filter on success finds its page walking seq.
DROP INDEX runs_status_seq;
CREATE INDEX runs_failed_seq ON runs (status, seq DESC) WHERE status > 2;
-- completions_created served only retention, which now walks completions in cursor order (the
-- order they were created in).
DROP INDEX completions_created;

-- +goose Down
CREATE INDEX completions_created ON completions (created_ms);
DROP INDEX runs_failed_seq;
CREATE INDEX runs_status_seq ON runs (status, seq DESC);
