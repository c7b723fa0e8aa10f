-- +goose Up
-- A job's armed_from_ms mark moves every pre-read in which its owed fires changed: for a job
-- firing every second, about once per fire, the biggest share of the scheduler's Postgres work.
-- Its index made every such move a new row version with an entry in all three indexes. Only
-- a new leader's takeover reads the marks, once, and a sequential scan of this narrow table
-- serves it (a million jobs: tens of milliseconds). Without the index, and with room left on
-- each page, a mark's move is a heap-only (HOT) update that touches no index.
DROP INDEX job_state_armed;
ALTER TABLE job_state SET (fillfactor = 70);

-- +goose Down
ALTER TABLE job_state RESET (fillfactor);
CREATE INDEX job_state_armed ON job_state (armed_from_ms) WHERE armed_from_ms IS NOT NULL;
