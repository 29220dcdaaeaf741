-- Carillon schema, version 17: service tokens, each with one role in one namespace. Only the
-- SHA-256 of a token is kept: the token itself is shown once, when it is created.
CREATE TABLE service_tokens (
    token_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    namespace_id BIGINT NOT NULL,
    name VARCHAR(63) NOT NULL,
    role VARCHAR(16) NOT NULL,
    secret_sha256 CHAR(64) NOT NULL,
    -- The token's first characters, to tell tokens apart in a listing.
    display_prefix VARCHAR(24) NOT NULL,
    created_at_ms BIGINT NOT NULL,
    created_by VARCHAR(255) NOT NULL,
    expires_at_ms BIGINT NULL,
    last_used_at_ms BIGINT NULL
);
CREATE UNIQUE INDEX service_tokens_secret_idx ON service_tokens (secret_sha256);
CREATE UNIQUE INDEX service_tokens_namespace_name_idx ON service_tokens (namespace_id, name);
