-- +goose Up
-- As on Postgres: the parent job is part of a pending fire's key, so a child fire (or its retry)
-- and the child's own fire (or retry) at the same time are two rows. 0: not a child fire. SQLite
-- cannot change a primary key: the table is rebuilt.
CREATE TABLE pending_fires_new (
    job_id        BIGINT NOT NULL,
    fire_ms       BIGINT NOT NULL, -- the scheduled time: part of the trigger id
    shard         INT    NOT NULL, -- -1: every shard (routing decides); else that shard only
    shard_total   INT    NOT NULL,
    attempt       INT    NOT NULL,
    trigger_type  INT    NOT NULL,
    fire_params   TEXT,            -- NULL: the job's params
    due_ms        BIGINT NOT NULL,
    parent_job_id BIGINT NOT NULL DEFAULT 0, -- the parent of a child fire: part of the trigger id
    PRIMARY KEY (job_id, fire_ms, shard, attempt, parent_job_id)
);
INSERT INTO pending_fires_new (job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms)
    SELECT job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms FROM pending_fires;
DROP TABLE pending_fires;
ALTER TABLE pending_fires_new RENAME TO pending_fires;
CREATE INDEX pending_fires_due ON pending_fires (due_ms);

-- +goose Down
-- Of the fires that only the parent told apart, the job's own is kept.
CREATE TABLE pending_fires_old (
    job_id       BIGINT NOT NULL,
    fire_ms      BIGINT NOT NULL,
    shard        INT    NOT NULL,
    shard_total  INT    NOT NULL,
    attempt      INT    NOT NULL,
    trigger_type INT    NOT NULL,
    fire_params  TEXT,
    due_ms       BIGINT NOT NULL,
    PRIMARY KEY (job_id, fire_ms, shard, attempt)
);
INSERT OR IGNORE INTO pending_fires_old (job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms)
    SELECT job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms FROM pending_fires
    ORDER BY parent_job_id;
DROP TABLE pending_fires;
ALTER TABLE pending_fires_old RENAME TO pending_fires;
CREATE INDEX pending_fires_due ON pending_fires (due_ms);
