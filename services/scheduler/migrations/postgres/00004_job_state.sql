-- +goose Up
-- A job's scheduling state moves to a narrow table of its own. The pre-read advances every due
-- job's fire times on every scan; in the wide jobs row that update rewrote the whole row and
-- added an entry to each of its five indexes. Here it writes a few numbers and three indexes.
--   next_fire_ms   the job's next fire not yet armed; NULL when it has none (stopped, NONE,
--                  a FIX_DELAY run in flight, a schedule that ended)
--   last_fire_ms   the last fire armed
--   armed_from_ms  the earliest fire a leader armed and may not have dispatched (see 00002)
CREATE TABLE job_state (
    job_id        BIGINT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    next_fire_ms  BIGINT,
    last_fire_ms  BIGINT,
    armed_from_ms BIGINT
);
INSERT INTO job_state (job_id, next_fire_ms, last_fire_ms, armed_from_ms)
    SELECT id, CASE WHEN status = 2 THEN next_fire_ms END, last_fire_ms, armed_from_ms FROM jobs;
-- The pre-read's due scan: only jobs with a next fire are in it.
CREATE INDEX job_state_due ON job_state (next_fire_ms) WHERE next_fire_ms IS NOT NULL;
CREATE INDEX job_state_armed ON job_state (armed_from_ms) WHERE armed_from_ms IS NOT NULL;
DROP INDEX jobs_due;
DROP INDEX jobs_armed;
ALTER TABLE jobs DROP COLUMN next_fire_ms;
ALTER TABLE jobs DROP COLUMN last_fire_ms;
ALTER TABLE jobs DROP COLUMN armed_from_ms;

-- +goose Down
ALTER TABLE jobs ADD COLUMN next_fire_ms BIGINT;
ALTER TABLE jobs ADD COLUMN last_fire_ms BIGINT;
ALTER TABLE jobs ADD COLUMN armed_from_ms BIGINT;
UPDATE jobs SET next_fire_ms = (SELECT s.next_fire_ms FROM job_state s WHERE s.job_id = jobs.id),
    last_fire_ms = (SELECT s.last_fire_ms FROM job_state s WHERE s.job_id = jobs.id),
    armed_from_ms = (SELECT s.armed_from_ms FROM job_state s WHERE s.job_id = jobs.id);
CREATE INDEX jobs_due ON jobs (next_fire_ms) WHERE status = 2;
CREATE INDEX jobs_armed ON jobs (armed_from_ms) WHERE armed_from_ms IS NOT NULL;
DROP TABLE job_state;
