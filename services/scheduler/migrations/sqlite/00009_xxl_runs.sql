-- +goose Up
-- The fires sent to XXL-JOB executors, one row per trigger id, written before the HTTP /run call:
-- a trigger id that has a row was sent (or is being sent) and is never sent again, whichever
-- replica re-fires it (XXL-JOB's executor rejects a repeated logId only while it is queued).
-- log_id is the XXL-JOB logId the fire was sent under; callbacks and /log name it.
CREATE TABLE xxl_runs (
    log_id        INTEGER PRIMARY KEY AUTOINCREMENT,
    trigger_id    TEXT    NOT NULL UNIQUE,
    job_id        BIGINT  NOT NULL,
    group_id      BIGINT  NOT NULL,
    address       TEXT    NOT NULL,
    log_date_time BIGINT  NOT NULL, -- TriggerParam.logDateTime: the fire's scheduled time, Unix ms
    shard         INT     NOT NULL,
    sent_at       BIGINT  NOT NULL, -- Unix ms
    result_at     BIGINT,           -- Unix ms the callback's result went to logsvc; NULL while live
    pulled_line   BIGINT  NOT NULL DEFAULT 0 -- the last /log line copied to logsvc
);
CREATE INDEX xxl_runs_live ON xxl_runs (sent_at) WHERE result_at IS NULL;

-- +goose Down
DROP TABLE xxl_runs;
