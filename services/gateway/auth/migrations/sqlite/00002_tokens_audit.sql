-- +goose Up
-- API tokens for automation, stored as SHA-256 hashes like sessions; the secret is shown once.
CREATE TABLE api_tokens (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    token_hash   TEXT   NOT NULL UNIQUE,
    user_id      BIGINT NOT NULL,
    name         TEXT   NOT NULL,
    expire_ms    BIGINT NOT NULL DEFAULT 0, -- 0: never
    create_ms    BIGINT NOT NULL,
    last_used_ms BIGINT NOT NULL DEFAULT 0
);
CREATE INDEX api_tokens_user ON api_tokens (user_id);

-- Who changed what; newest first by id.
CREATE TABLE audit_events (
    id       INTEGER PRIMARY KEY AUTOINCREMENT,
    time_ms  BIGINT NOT NULL,
    username TEXT   NOT NULL,
    action   TEXT   NOT NULL,
    resource TEXT   NOT NULL,
    detail   TEXT   NOT NULL
);

-- +goose Down
DROP TABLE audit_events;
DROP TABLE api_tokens;
