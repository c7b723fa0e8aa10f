-- +goose Up
-- A manual trigger forwarded to its partition's leader: the forwarding replica reserves the
-- fire's time (manual_fires) and a row here, and the replica that dispatches the fire claims the
-- row first, once: the leader when the forwarded call reaches it, or the forwarder when the call
-- failed without an answer. So the trigger runs once even when the leader's answer is lost with
-- its connection. A job's rows an hour older than its newest forwarded trigger go when that one
-- is reserved.
CREATE TABLE manual_claims (
    job_id     BIGINT NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    fire_ms    BIGINT NOT NULL,
    claimed_by TEXT,
    PRIMARY KEY (job_id, fire_ms)
);

-- +goose Down
DROP TABLE manual_claims;
