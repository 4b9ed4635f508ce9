//! Rebuilds the crate when a migration, function, view or query file changes: all are
//! embedded. Also writes the list of `sql/functions/` and `sql/views/` files
//! (`$OUT_DIR/repeatable.rs`, included by `migrate`), so a new file is embedded without
//! naming it anywhere; `conventions::every_function_and_view_file_is_embedded` holds the list
//! to the directories.
use std::fmt::Write as _;
use std::path::Path;

fn main() {
    println!("cargo:rerun-if-changed=sql");
    println!("cargo:rerun-if-changed=sql/queries");
    let root = std::env::var("CARGO_MANIFEST_DIR").expect("CARGO_MANIFEST_DIR");
    let mut out = String::from("&[\n");
    for dir in ["functions", "views"] {
        println!("cargo:rerun-if-changed=sql/{dir}");
        let path = Path::new(&root).join("sql").join(dir);
        let mut names: Vec<String> = std::fs::read_dir(&path)
            .unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
            .map(|e| {
                e.expect("dir entry")
                    .file_name()
                    .to_string_lossy()
                    .into_owned()
            })
            .filter(|n| n.ends_with(".sql"))
            .collect();
        names.sort();
        for name in names {
            let file = path.join(&name);
            writeln!(
                out,
                "    ({:?}, include_str!({:?})),",
                format!("{dir}/{name}"),
                file.display().to_string()
            )
            .expect("write to a string");
        }
    }
    out.push_str("]\n");
    let target = Path::new(&std::env::var("OUT_DIR").expect("OUT_DIR")).join("repeatable.rs");
    std::fs::write(&target, out).unwrap_or_else(|e| panic!("write {}: {e}", target.display()));
}
