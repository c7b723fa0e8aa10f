-- +goose Up
-- runs is XXL-JOB's xxl_job_log: one row per fire, keyed by its deterministic trigger id and
-- filled by the scheduler's trigger record and the executor's result, in either order. seq orders
-- runs by arrival for keyset pagination. Times are Unix ms, 0 when unknown; enums are the proto
-- numbers. Until the trigger record arrives, scheduled_ms holds the result's start time so the
-- run still falls on the right day in reports and retention.
CREATE TABLE runs (
    seq              INTEGER PRIMARY KEY AUTOINCREMENT,
    trigger_id       TEXT   NOT NULL UNIQUE,
    job_id           BIGINT NOT NULL DEFAULT 0,
    group_id         BIGINT NOT NULL DEFAULT 0,
    trigger_type     INT    NOT NULL DEFAULT 0,
    scheduled_ms     BIGINT NOT NULL DEFAULT 0,
    trigger_ms       BIGINT NOT NULL DEFAULT 0,
    executor_address TEXT   NOT NULL DEFAULT '',
    handler          TEXT   NOT NULL DEFAULT '',
    params           TEXT   NOT NULL DEFAULT '',
    shard_index      INT    NOT NULL DEFAULT 0,
    shard_total      INT    NOT NULL DEFAULT 1,
    attempt          INT    NOT NULL DEFAULT 0,
    retries_left     INT    NOT NULL DEFAULT 0,
    route_strategy   INT    NOT NULL DEFAULT 0,
    trigger_outcome  INT    NOT NULL DEFAULT 0,
    trigger_message  TEXT   NOT NULL DEFAULT '',
    status           INT    NOT NULL,
    handle_message   TEXT   NOT NULL DEFAULT '',
    start_ms         BIGINT NOT NULL DEFAULT 0,
    end_ms           BIGINT NOT NULL DEFAULT 0,
    alarm_status     INT    NOT NULL DEFAULT 1,
    trace_id         TEXT   NOT NULL DEFAULT ''
);
-- The UI's queries: a job's or a group's runs newest first, runs by status, a time range.
CREATE INDEX runs_job_seq ON runs (job_id, seq DESC);
CREATE INDEX runs_group_seq ON runs (group_id, seq DESC);
CREATE INDEX runs_status_seq ON runs (status, seq DESC);
CREATE INDEX runs_scheduled ON runs (scheduled_ms);

-- run_lines holds each run's output, numbered from 1 by the executor.
CREATE TABLE run_lines (
    trigger_id TEXT   NOT NULL,
    line_no    BIGINT NOT NULL,
    unix_ms    BIGINT NOT NULL,
    text       TEXT   NOT NULL,
    PRIMARY KEY (trigger_id, line_no)
) WITHOUT ROWID;

-- completions is the outbox WatchCompletions streams: one row per run that ended, in commit
-- order of cursor (SQLite has a single writer, so a reader never skips a cursor that commits
-- late). AUTOINCREMENT: a cursor or seq is never reused after a delete.
CREATE TABLE completions (
    cursor          INTEGER PRIMARY KEY AUTOINCREMENT,
    trigger_id      TEXT   NOT NULL UNIQUE,
    job_id          BIGINT NOT NULL,
    status          INT    NOT NULL,
    trigger_outcome INT    NOT NULL,
    attempt         INT    NOT NULL,
    shard_index     INT    NOT NULL,
    shard_total     INT    NOT NULL,
    scheduled_ms    BIGINT NOT NULL,
    end_ms          BIGINT NOT NULL,
    trigger_type    INT    NOT NULL,
    params          TEXT   NOT NULL,
    created_ms      BIGINT NOT NULL
);
CREATE INDEX completions_created ON completions (created_ms);

-- +goose Down
DROP TABLE completions;
DROP TABLE run_lines;
DROP TABLE runs;
