//! Rebuilds the crate when a migration or query file changes: both are embedded.
fn main() {
    println!("cargo:rerun-if-changed=sql");
    println!("cargo:rerun-if-changed=sql/queries");
}
