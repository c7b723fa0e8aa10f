-- +goose Up
CREATE TABLE users (
    id            INTEGER PRIMARY KEY AUTOINCREMENT,
    username      TEXT   NOT NULL UNIQUE,
    password_hash TEXT   NOT NULL,
    role          INT    NOT NULL,
    group_ids     TEXT   NOT NULL DEFAULT '',
    create_ms     BIGINT NOT NULL
);

-- Session tokens are stored as SHA-256 hashes: a leaked table grants nothing.
CREATE TABLE sessions (
    token_hash TEXT   PRIMARY KEY,
    user_id    BIGINT NOT NULL,
    expire_ms  BIGINT NOT NULL
);
CREATE INDEX sessions_user ON sessions (user_id);

-- +goose Down
DROP TABLE sessions;
DROP TABLE users;
