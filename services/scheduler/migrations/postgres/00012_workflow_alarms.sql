-- +goose Up
-- A workflow's alarm emails get an alarm when one of its instances ends FAILED. The failure is
-- stored in workflow_alarms in the transaction that decides it and deleted once logsvc has
-- delivered its alarm, so a replica that dies in between leaves it to the others. next_try_ms
-- leases it to the replica sending it, or puts off the next try after a failed one; attempts
-- counts the tries.
ALTER TABLE workflows ADD COLUMN alarm_emails TEXT NOT NULL DEFAULT '';
CREATE TABLE workflow_alarms (
    instance_id TEXT   NOT NULL,
    end_ms      BIGINT NOT NULL,
    next_try_ms BIGINT NOT NULL DEFAULT 0,
    attempts    INT    NOT NULL DEFAULT 0,
    PRIMARY KEY (instance_id, end_ms)
);
CREATE INDEX workflow_alarms_next ON workflow_alarms (next_try_ms);

-- +goose Down
DROP TABLE workflow_alarms;
ALTER TABLE workflows DROP COLUMN alarm_emails;
