-- +goose Up
-- Jobs hash to partitions (job id mod the cluster's partition count, fixed in etcd when the
-- cluster first starts), each led by one scheduler replica under an epoch of its own.
--   job_state.part   the job's partition; -1 until a scheduler that knows the count assigns it
--                    (at its start, for rows written before partitions existed)
--   partition_fence  per partition, the epoch of the leader allowed to write its scheduling
--                    state (it replaces the single leader_fence row)
--   partition_cursor per partition, the last logsvc completion its leader acted on (it replaces
--                    completion_cursor, whose value a partition without a row starts from)
ALTER TABLE job_state ADD COLUMN part INT NOT NULL DEFAULT -1;
CREATE INDEX job_state_part_due ON job_state (part, next_fire_ms) WHERE next_fire_ms IS NOT NULL;
DROP INDEX job_state_due;
CREATE TABLE partition_fence (
    part   INT    PRIMARY KEY,
    epoch  BIGINT NOT NULL,
    holder TEXT   NOT NULL
);
CREATE TABLE partition_cursor (
    part   INT    PRIMARY KEY,
    cursor BIGINT NOT NULL
);

-- +goose Down
DROP TABLE partition_cursor;
DROP TABLE partition_fence;
CREATE INDEX job_state_due ON job_state (next_fire_ms) WHERE next_fire_ms IS NOT NULL;
DROP INDEX job_state_part_due;
ALTER TABLE job_state DROP COLUMN part;
