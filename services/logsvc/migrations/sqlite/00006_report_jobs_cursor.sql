-- +goose Up
-- report_group_jobs is no longer counted in the transaction that publishes a completion but by
-- a follower of completions (countJobs), a few seconds later, so a job that fires every second
-- costs an upsert per few fires instead of one per fire. Every completion so far is counted.
INSERT INTO cursors (name, position) SELECT 'report_jobs', COALESCE(MAX(cursor), 0) FROM completions;

-- +goose Down
DELETE FROM cursors WHERE name = 'report_jobs';
