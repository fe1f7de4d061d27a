//! Embeds every file under `demo/` into the binary as the zero-config site,
//! with the project's README and BENCHMARKS as plain text (`/readme.txt`,
//! `/benchmarks.txt`), which the demo page links to: there is no public URL
//! to point at, and the binary is what a newcomer has.

use std::fmt::Write;
use std::path::Path;

fn main() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("demo");
    println!("cargo:rerun-if-changed={}", demo.display());
    let mut files = Vec::new();
    collect(&demo, &demo, &mut files);
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for (url, name) in [("/readme.txt", "README.md"), ("/benchmarks.txt", "BENCHMARKS.md")] {
        let path = repo.join(name);
        if path.is_file() {
            files.push((url.to_string(), path.to_string_lossy().into_owned()));
        }
    }
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
