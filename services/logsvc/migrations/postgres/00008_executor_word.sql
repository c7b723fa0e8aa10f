-- +goose Up
-- The executor's word decides a run. A run ended without it (a failed trigger record, a dispatch
-- whose answer never came decided as not delivered, a lost run) may be overruled once by the
-- executor's report: runs.judged is 0 for a run whose status is the executor's (or that is
-- running), 1 for one ended without the executor's word (it may be reopened), 2 for one that was
-- reopened (never again). A reopened run publishes a correction of its completion:
-- completions.replaces_status is the status of the completion it corrects (0 for a run's first).
-- Both columns have a constant default, so adding them rewrites no rows.
ALTER TABLE runs ADD COLUMN judged INT NOT NULL DEFAULT 0;
ALTER TABLE completions ADD COLUMN replaces_status INT NOT NULL DEFAULT 0;

-- +goose Down
ALTER TABLE completions DROP COLUMN replaces_status;
ALTER TABLE runs DROP COLUMN judged;
