-- +goose Up
-- What a run's final result published for the workflow nodes downstream of it
-- (RunResult.outputs, at most 64 keys and 16 KiB), as JSON; '' for none. Its completion carries
-- it to the scheduler, which passes it on in the downstream nodes' context.
ALTER TABLE runs ADD COLUMN outputs TEXT NOT NULL DEFAULT '';
ALTER TABLE completions ADD COLUMN outputs TEXT NOT NULL DEFAULT '';

-- +goose Down
ALTER TABLE completions DROP COLUMN outputs;
ALTER TABLE runs DROP COLUMN outputs;
