-- +goose Up
-- As on Postgres: only a new leader's takeover reads the armed_from_ms marks, once, and a scan
-- of this narrow table serves it; the index cost every move of a mark.
DROP INDEX job_state_armed;

-- +goose Down
CREATE INDEX job_state_armed ON job_state (armed_from_ms) WHERE armed_from_ms IS NOT NULL;
