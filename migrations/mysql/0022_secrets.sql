-- Carillon schema, version 22: named secrets of a namespace, sealed with the operators' key
-- (AES-256-GCM, the namespace and name bound in): `v1.<key id>.<nonce, ciphertext and tag>`.
-- key_id repeats the sealed value's, so a rotation finds what is left under an old key.
CREATE TABLE secrets (
    secret_id BIGINT NOT NULL AUTO_INCREMENT PRIMARY KEY,
    namespace_id BIGINT NOT NULL,
    -- Compared byte for byte: the sealed value is bound to the name as written.
    name VARCHAR(63) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    sealed TEXT NOT NULL,
    key_id VARCHAR(32) NOT NULL,
    version BIGINT NOT NULL,
    created_at_ms BIGINT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    updated_by VARCHAR(255) NOT NULL
);
CREATE UNIQUE INDEX secrets_namespace_name_idx ON secrets (namespace_id, name);
CREATE INDEX secrets_key_idx ON secrets (key_id);
