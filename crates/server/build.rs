//! Embeds every file under `demo/` into the binary as the zero-config site.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo");
    println!("cargo:rerun-if-changed={}", demo.display());
    let mut files = Vec::new();
    collect(&demo, &demo, &mut files);
    files.sort();
    let mut table = String::from("&[\n");
    for (url, path) in files {
        println!("cargo:rerun-if-changed={path}");
        writeln!(table, "    pipeline::EmbeddedFile {{ path: {url:?}, bytes: include_bytes!({path:?}) }},")
            .unwrap();
    }
    table.push(']');
    let out = Path::new(&std::env::var("OUT_DIR").unwrap()).join("demo_files.rs");
    std::fs::write(out, table).unwrap();
}

fn collect(base: &Path, dir: &Path, files: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            collect(base, &path, files);
        } else {
            let rel = path.strip_prefix(base).unwrap().to_string_lossy().replace('\\', "/");
            files.push((format!("/{rel}"), path.to_string_lossy().into_owned()));
        }
    }
}
