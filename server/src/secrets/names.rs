//! What may name a secret: a leaf, so job documents that name secrets are checked without
//! the store.

/// The longest secret name.
const MAX_NAME: usize = 63;

/// Why `name` cannot name a secret, if it cannot.
pub fn check_name(name: &str) -> Result<(), String> {
    let valid = !name.is_empty()
        && name.len() <= MAX_NAME
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_-.".contains(&b))
        && !name.starts_with('.');
    if valid {
        Ok(())
    } else {
        Err(format!(
            "{name:?}: 1 to {MAX_NAME} letters, digits, '_', '-' and '.', not starting with '.'"
        ))
    }
}
