-- +goose Up
-- Fires the leader decides on from a completion (retries, child jobs). They are written with the
-- completion cursor in one fenced transaction, armed in the ring when due (by the leader at once,
-- or by the pre-read of whichever leader comes next), and deleted once dispatched, so a retry
-- waiting out its backoff survives a failover.
CREATE TABLE pending_fires (
    job_id       BIGINT NOT NULL,
    fire_ms      BIGINT NOT NULL, -- the scheduled time: part of the trigger id
    shard        INT    NOT NULL, -- -1: every shard (routing decides); else that shard only
    shard_total  INT    NOT NULL,
    attempt      INT    NOT NULL,
    trigger_type INT    NOT NULL,
    fire_params  TEXT,            -- NULL: the job's params
    due_ms       BIGINT NOT NULL,
    PRIMARY KEY (job_id, fire_ms, shard, attempt)
);
CREATE INDEX pending_fires_due ON pending_fires (due_ms);

-- Jobs deleted through the API on any replica, so the leader disarms what it armed for them.
CREATE TABLE job_tombstones (
    job_id     BIGINT PRIMARY KEY,
    deleted_ms BIGINT NOT NULL
);
CREATE INDEX job_tombstones_deleted ON job_tombstones (deleted_ms);

-- +goose Down
DROP TABLE job_tombstones;
DROP TABLE pending_fires;
