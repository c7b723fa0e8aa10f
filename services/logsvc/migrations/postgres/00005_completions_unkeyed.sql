-- +goose Up
-- A run is published once by its runs row: complete() is called for a run only as that row,
-- locked by the transaction, first has both its record and a final status (ingestion, the
-- lost-run sweep and the sweep of runs without a record each check the stored row under its
-- lock). The unique index on completions.trigger_id, with ON CONFLICT DO NOTHING, repeated
-- that check at the price of a speculative insert and a text index entry per fire: about 5 of
-- Postgres's 30 CPU µs per fire in BenchmarkIngestFires. Nothing reads completions by trigger id.
ALTER TABLE completions DROP CONSTRAINT completions_trigger_id_key;

-- +goose Down
ALTER TABLE completions ADD CONSTRAINT completions_trigger_id_key UNIQUE (trigger_id);
