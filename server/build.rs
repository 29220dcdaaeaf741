//! Rebuilds the crate when a migration is added: `sqlx::migrate!` embeds the folders' files
//! at compile time, and cargo does not otherwise watch them.
fn main() {
    println!("cargo:rerun-if-changed=../migrations");
}
