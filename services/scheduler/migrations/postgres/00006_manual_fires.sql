-- +goose Up
-- The scheduled time of a job's last manual (or API) trigger. Each accepted trigger reserves a
-- time strictly after it, so two triggers in the same millisecond, on any replica, get two
-- trigger ids instead of merging into one run.
CREATE TABLE manual_fires (
    job_id  BIGINT PRIMARY KEY REFERENCES jobs (id) ON DELETE CASCADE,
    last_ms BIGINT NOT NULL
);

-- +goose Down
DROP TABLE manual_fires;
