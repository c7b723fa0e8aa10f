-- +goose Up
CREATE TABLE executor_groups (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    app_name         TEXT    NOT NULL UNIQUE,
    title            TEXT    NOT NULL,
    address_type     INTEGER NOT NULL,
    manual_addresses TEXT    NOT NULL DEFAULT '',
    access_token     TEXT    NOT NULL DEFAULT '',
    update_ms        INTEGER NOT NULL
);

-- +goose Down
DROP TABLE executor_groups;
