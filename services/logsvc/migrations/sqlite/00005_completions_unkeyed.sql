-- +goose Up
-- As on Postgres: a run is published once by its runs row, and the unique index on
-- completions.trigger_id goes. SQLite cannot drop a column's UNIQUE, so the table is rebuilt;
-- its AUTOINCREMENT counter carries over, so no cursor is ever handed out twice.
ALTER TABLE completions RENAME TO completions_old;
CREATE TABLE completions (
    cursor          INTEGER PRIMARY KEY AUTOINCREMENT,
    trigger_id      TEXT   NOT NULL,
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
    created_ms      BIGINT NOT NULL,
    group_id        BIGINT NOT NULL DEFAULT 0
);
INSERT INTO completions (cursor, trigger_id, job_id, status, trigger_outcome, attempt, shard_index, shard_total,
        scheduled_ms, end_ms, trigger_type, params, created_ms, group_id)
    SELECT cursor, trigger_id, job_id, status, trigger_outcome, attempt, shard_index, shard_total,
        scheduled_ms, end_ms, trigger_type, params, created_ms, group_id FROM completions_old;
DELETE FROM sqlite_sequence WHERE name = 'completions';
INSERT INTO sqlite_sequence (name, seq) SELECT 'completions', seq FROM sqlite_sequence WHERE name = 'completions_old';
DROP TABLE completions_old;

-- +goose Down
ALTER TABLE completions RENAME TO completions_old;
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
    created_ms      BIGINT NOT NULL,
    group_id        BIGINT NOT NULL DEFAULT 0
);
INSERT INTO completions SELECT cursor, trigger_id, job_id, status, trigger_outcome, attempt, shard_index, shard_total,
        scheduled_ms, end_ms, trigger_type, params, created_ms, group_id FROM completions_old;
DELETE FROM sqlite_sequence WHERE name = 'completions';
INSERT INTO sqlite_sequence (name, seq) SELECT 'completions', seq FROM sqlite_sequence WHERE name = 'completions_old';
DROP TABLE completions_old;
