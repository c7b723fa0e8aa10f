-- +goose Up
-- As on Postgres: workflows, their versions and instances; a workflow node's fire is a pending
-- fire whose key names the workflow and the node. SQLite cannot change a primary key: the
-- pending_fires table is rebuilt.
CREATE TABLE workflows (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    group_id         BIGINT NOT NULL,
    name             TEXT   NOT NULL,
    owner            TEXT   NOT NULL DEFAULT '',
    schedule_type    INT    NOT NULL,
    schedule_expr    TEXT   NOT NULL DEFAULT '',
    time_zone        TEXT   NOT NULL DEFAULT '',
    misfire_strategy INT    NOT NULL,
    status           INT    NOT NULL,
    max_concurrent   INT    NOT NULL,
    version          BIGINT NOT NULL,
    part             INT    NOT NULL,
    next_fire_ms     BIGINT,
    create_ms        BIGINT NOT NULL,
    update_ms        BIGINT NOT NULL
);
CREATE INDEX workflows_part_due ON workflows (part, next_fire_ms) WHERE next_fire_ms IS NOT NULL;
CREATE INDEX workflows_group ON workflows (group_id, id);
CREATE TABLE workflow_versions (
    workflow_id BIGINT NOT NULL,
    version     BIGINT NOT NULL,
    name        TEXT   NOT NULL,
    graph       TEXT   NOT NULL,
    create_ms   BIGINT NOT NULL,
    PRIMARY KEY (workflow_id, version)
);
CREATE TABLE workflow_instances (
    id           TEXT   PRIMARY KEY,
    workflow_id  BIGINT NOT NULL,
    version      BIGINT NOT NULL,
    status       INT    NOT NULL,
    trigger_type INT    NOT NULL,
    scheduled_ms BIGINT NOT NULL,
    params       TEXT   NOT NULL DEFAULT '{}',
    nodes        TEXT   NOT NULL,
    create_ms    BIGINT NOT NULL,
    end_ms       BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX workflow_instances_workflow ON workflow_instances (workflow_id, scheduled_ms);
CREATE INDEX workflow_instances_running ON workflow_instances (workflow_id) WHERE status = 1;
CREATE TABLE pending_fires_new (
    job_id        BIGINT NOT NULL,
    fire_ms       BIGINT NOT NULL,
    shard         INT    NOT NULL,
    shard_total   INT    NOT NULL,
    attempt       INT    NOT NULL,
    trigger_type  INT    NOT NULL,
    fire_params   TEXT,
    due_ms        BIGINT NOT NULL,
    parent_job_id BIGINT NOT NULL DEFAULT 0,
    wf_id         BIGINT NOT NULL DEFAULT 0,
    wf_node       INT    NOT NULL DEFAULT 0,
    wf            TEXT,
    PRIMARY KEY (job_id, fire_ms, shard, attempt, parent_job_id, wf_id, wf_node)
);
INSERT INTO pending_fires_new (job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms, parent_job_id)
    SELECT job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms, parent_job_id FROM pending_fires;
DROP TABLE pending_fires;
ALTER TABLE pending_fires_new RENAME TO pending_fires;
CREATE INDEX pending_fires_due ON pending_fires (due_ms);

-- +goose Down
CREATE TABLE pending_fires_old (
    job_id        BIGINT NOT NULL,
    fire_ms       BIGINT NOT NULL,
    shard         INT    NOT NULL,
    shard_total   INT    NOT NULL,
    attempt       INT    NOT NULL,
    trigger_type  INT    NOT NULL,
    fire_params   TEXT,
    due_ms        BIGINT NOT NULL,
    parent_job_id BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (job_id, fire_ms, shard, attempt, parent_job_id)
);
INSERT INTO pending_fires_old (job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms, parent_job_id)
    SELECT job_id, fire_ms, shard, shard_total, attempt, trigger_type, fire_params, due_ms, parent_job_id FROM pending_fires
    WHERE wf_id = 0;
DROP TABLE pending_fires;
ALTER TABLE pending_fires_old RENAME TO pending_fires;
CREATE INDEX pending_fires_due ON pending_fires (due_ms);
DROP TABLE workflow_instances;
DROP TABLE workflow_versions;
DROP TABLE workflows;
