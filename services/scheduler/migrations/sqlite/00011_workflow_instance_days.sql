-- +goose Up
-- Reports count workflow instances per day of their scheduled time (CountWorkflowInstances).
CREATE INDEX workflow_instances_scheduled ON workflow_instances (scheduled_ms);

-- +goose Down
DROP INDEX workflow_instances_scheduled;
