-- +goose Up
-- A child fire's scheduled time is its parent's, which the child's own schedule may have too:
-- the parent job is part of the child fire's trigger id, and of its key here, so the child fire
-- (or its retry) and the child's own fire (or retry) at that time are two rows. 0: not a child fire.
ALTER TABLE pending_fires ADD COLUMN parent_job_id BIGINT NOT NULL DEFAULT 0;
ALTER TABLE pending_fires DROP CONSTRAINT pending_fires_pkey;
ALTER TABLE pending_fires ADD PRIMARY KEY (job_id, fire_ms, shard, attempt, parent_job_id);

-- +goose Down
-- Of the fires that only the parent told apart, the job's own is kept.
DELETE FROM pending_fires p WHERE parent_job_id <> 0 AND EXISTS (SELECT 1 FROM pending_fires q
    WHERE q.job_id = p.job_id AND q.fire_ms = p.fire_ms AND q.shard = p.shard AND q.attempt = p.attempt
    AND q.parent_job_id < p.parent_job_id);
ALTER TABLE pending_fires DROP CONSTRAINT pending_fires_pkey;
ALTER TABLE pending_fires ADD PRIMARY KEY (job_id, fire_ms, shard, attempt);
ALTER TABLE pending_fires DROP COLUMN parent_job_id;
