-- +goose Up
CREATE TABLE jobs (
    id                INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id          BIGINT  NOT NULL,
    name              TEXT    NOT NULL,
    author            TEXT    NOT NULL DEFAULT '',
    alarm_emails      TEXT    NOT NULL DEFAULT '',
    schedule_type     INT     NOT NULL,
    schedule_expr     TEXT    NOT NULL DEFAULT '',
    time_zone         TEXT    NOT NULL DEFAULT '',
    misfire_strategy  INT     NOT NULL,
    route_strategy    INT     NOT NULL,
    handler           TEXT    NOT NULL DEFAULT '',
    params            TEXT    NOT NULL DEFAULT '',
    block_strategy    INT     NOT NULL,
    timeout_seconds   INT     NOT NULL DEFAULT 0,
    retry_count       INT     NOT NULL DEFAULT 0,
    retry_backoff     INT     NOT NULL,
    retry_interval_ms BIGINT  NOT NULL DEFAULT 0,
    glue_type         INT     NOT NULL,
    glue_source       TEXT    NOT NULL DEFAULT '',
    glue_remark       TEXT    NOT NULL DEFAULT '',
    glue_updated_ms   BIGINT  NOT NULL DEFAULT 0,
    child_job_ids     TEXT    NOT NULL DEFAULT '',
    status            INT     NOT NULL,
    last_fire_ms      BIGINT,
    next_fire_ms      BIGINT,
    version           BIGINT  NOT NULL DEFAULT 1,
    create_ms         BIGINT  NOT NULL,
    update_ms         BIGINT  NOT NULL
);
-- The pre-read scan reads only running jobs due inside the window: its cost follows due jobs.
CREATE INDEX jobs_due ON jobs (next_fire_ms) WHERE status = 2;
CREATE INDEX jobs_group ON jobs (group_id, id);

CREATE TABLE glue_versions (
    job_id      BIGINT NOT NULL,
    version     BIGINT NOT NULL,
    glue_type   INT    NOT NULL,
    glue_source TEXT   NOT NULL,
    glue_remark TEXT   NOT NULL,
    create_ms   BIGINT NOT NULL,
    PRIMARY KEY (job_id, version)
);

-- One row: the epoch of the leader allowed to write scheduling state. A leader raises it to its
-- own epoch inside every scheduling transaction; a deposed leader's lower epoch finds no row.
CREATE TABLE leader_fence (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    epoch  BIGINT NOT NULL,
    holder TEXT   NOT NULL
);
INSERT INTO leader_fence (id, epoch, holder) VALUES (1, 0, '');

-- The last logsvc completion the leader acted on (retries, child jobs, FIX_DELAY), so a new
-- leader resumes where the old one stopped.
CREATE TABLE completion_cursor (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    cursor BIGINT NOT NULL
);
INSERT INTO completion_cursor (id, cursor) VALUES (1, 0);

-- +goose Down
DROP TABLE completion_cursor;
DROP TABLE leader_fence;
DROP TABLE glue_versions;
DROP TABLE jobs;
