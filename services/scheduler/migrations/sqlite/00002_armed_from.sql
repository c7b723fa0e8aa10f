-- +goose Up
-- armed_from_ms: the earliest fire of the job that a leader armed and may not have dispatched.
-- Every fire before it was dispatched; fires in [armed_from_ms, next_fire_ms) are owed unless
-- logsvc knows their trigger ids. A new leader re-fires those after a crash or a handover.
ALTER TABLE jobs ADD COLUMN armed_from_ms BIGINT;
CREATE INDEX jobs_armed ON jobs (armed_from_ms) WHERE armed_from_ms IS NOT NULL;
-- The leader re-reads jobs changed through the API (on any replica) to update what it armed.
CREATE INDEX jobs_updated ON jobs (update_ms);

-- +goose Down
DROP INDEX jobs_updated;
DROP INDEX jobs_armed;
ALTER TABLE jobs DROP COLUMN armed_from_ms;
