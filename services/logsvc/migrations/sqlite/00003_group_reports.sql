-- +goose Up
-- The report counters gain the executor group, so a user limited to some groups sees only their
-- runs in reports and on the dashboard: report_group_days and report_group_jobs replace
-- report_days and report_jobs (a day over all groups is a sum over a few rows). report_minutes
-- counts by the minute of the scheduled time, for the dashboard's last hour; rows older than a
-- day are pruned. completions keeps each run's group so complete() can count it.
ALTER TABLE completions ADD COLUMN group_id BIGINT NOT NULL DEFAULT 0;
CREATE TABLE report_group_days (
    day      BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    success  BIGINT NOT NULL DEFAULT 0,
    fail     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (day, group_id)
);
CREATE TABLE report_group_jobs (
    day      BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    job_id   BIGINT NOT NULL,
    success  BIGINT NOT NULL DEFAULT 0,
    fail     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (day, group_id, job_id)
);
CREATE TABLE report_minutes (
    minute   BIGINT NOT NULL,
    group_id BIGINT NOT NULL,
    success  BIGINT NOT NULL DEFAULT 0,
    fail     BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (minute, group_id)
);
-- The counters kept so far knew no group: a job's go to the group of its newest stored run, or
-- to group 0 (counted for admins only) when none is left.
INSERT INTO report_group_jobs (day, group_id, job_id, success, fail)
    SELECT rj.day, COALESCE((SELECT r.group_id FROM runs r WHERE r.job_id = rj.job_id ORDER BY r.seq DESC LIMIT 1), 0),
        rj.job_id, rj.success, rj.fail
    FROM report_jobs rj;
INSERT INTO report_group_days (day, group_id, success, fail)
    SELECT day, group_id, SUM(success), SUM(fail) FROM report_group_jobs GROUP BY day, group_id;
DROP TABLE report_jobs;
DROP TABLE report_days;

-- +goose Down
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
    SELECT day, SUM(success), SUM(fail) FROM report_group_days GROUP BY day;
INSERT INTO report_jobs (day, job_id, success, fail)
    SELECT day, job_id, SUM(success), SUM(fail) FROM report_group_jobs GROUP BY day, job_id;
DROP TABLE report_minutes;
DROP TABLE report_group_jobs;
DROP TABLE report_group_days;
ALTER TABLE completions DROP COLUMN group_id;
