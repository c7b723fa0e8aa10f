-- +goose Up
-- report_days and report_jobs count finished runs by UTC day of their scheduled time (day =
-- scheduled_ms / 86400000), overall and per job. They grow as completions are written, in the
-- same transaction, so reports never rescan runs; clearing or pruning runs leaves them alone,
-- as XXL-JOB's xxl_job_log_report outlives its logs. Running runs are counted live through
-- runs_running, which holds only running rows.
CREATE TABLE report_days (
    day     INTEGER PRIMARY KEY,
    success BIGINT NOT NULL DEFAULT 0,
    fail    BIGINT NOT NULL DEFAULT 0
);
CREATE TABLE report_jobs (
    day     BIGINT NOT NULL,
    job_id  BIGINT NOT NULL,
    success BIGINT NOT NULL DEFAULT 0,
    fail    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (day, job_id)
);
INSERT INTO report_days (day, success, fail)
    SELECT scheduled_ms / 86400000, SUM(CASE WHEN status = 2 THEN 1 ELSE 0 END), SUM(CASE WHEN status > 2 THEN 1 ELSE 0 END)
    FROM completions GROUP BY scheduled_ms / 86400000;
INSERT INTO report_jobs (day, job_id, success, fail)
    SELECT scheduled_ms / 86400000, job_id, SUM(CASE WHEN status = 2 THEN 1 ELSE 0 END), SUM(CASE WHEN status > 2 THEN 1 ELSE 0 END)
    FROM completions GROUP BY scheduled_ms / 86400000, job_id;

-- Runs still running (few at any time): the lost-run sweep and the reports' running counts.
CREATE INDEX runs_running ON runs (scheduled_ms, seq) WHERE status = 1;
-- Runs that ended before their trigger record arrived: the sweep that completes them anyway.
CREATE INDEX runs_unrecorded ON runs (end_ms) WHERE trigger_outcome = 0 AND status > 1;
-- The log list filtered by executor address.
CREATE INDEX runs_address_seq ON runs (executor_address, seq DESC);

-- cursors keeps how far a background follower of completions (the alarms) has got.
CREATE TABLE cursors (
    name     TEXT   PRIMARY KEY,
    position BIGINT NOT NULL
);
INSERT INTO cursors (name, position) SELECT 'alarms', COALESCE(MAX(cursor), 0) FROM completions;

-- +goose Down
DROP TABLE cursors;
DROP INDEX runs_address_seq;
DROP INDEX runs_unrecorded;
DROP INDEX runs_running;
DROP TABLE report_jobs;
DROP TABLE report_days;
