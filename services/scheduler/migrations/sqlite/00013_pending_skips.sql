-- +goose Up
-- A late fire its job's misfire strategy skips is stored as a pending fire with the reason it
-- was skipped, in the pre-read transaction that advances the job past it, and its row goes once
-- logsvc has its SKIPPED record: a leader that dies between the two leaves the record to the
-- next leader, where it was lost before.
ALTER TABLE pending_fires ADD COLUMN skip_reason TEXT;

-- +goose Down
-- Without the column a skipped fire's row would read as a fire to run: it goes, record or not.
DELETE FROM pending_fires WHERE skip_reason IS NOT NULL;
ALTER TABLE pending_fires DROP COLUMN skip_reason;
