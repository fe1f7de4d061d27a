//! The workspace's shape, kept: no `.rs` file under `crates/` past
//! [`MAX_LINES`] lines, no import circle between the files of a crate, and
//! docs/ARCHITECTURE.md naming every module file and no file that is gone.
//!
//! A crate's files are its modules (`src/a.rs` or `src/a/mod.rs` is
//! `crate::a`, `src/a/b.rs` is `crate::a::b`; `tests/`, `benches/` and
//! `build.rs` are roots of their own). A file depends on another when it
//! names it by path — `use crate::a::B`, `use super::b::C`, `use self::c`,
//! `use c::D` for a child module `c`, or `crate::a::f()` in code — the path
//! resolved to the longest module prefix that is a file. A file naming one
//! of its ancestors is not counted: a child seeing its parent's items is
//! Rust's scoping (`use super::*`), and the parent declared it anyway. The
//! reading is textual (comments and strings skipped, inline `mod x { … }`
//! followed), so it needs nothing beyond std and runs in milliseconds.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

/// Past this a file wants splitting (the project's rule).
const MAX_LINES: usize = 1000;

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().unwrap()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "target") {
                continue;
            }
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_rust_file_is_over_the_line_limit() {
    let root = workspace();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    assert!(files.len() > 50, "found only {} files under {}", files.len(), root.display());
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = fs::read_to_string(f).ok()?.lines().count();
            (lines > MAX_LINES)
                .then(|| format!("{} ({lines} lines)", f.strip_prefix(&root).unwrap().display()))
        })
        .collect();
    long.sort();
    assert!(
        long.is_empty(),
        "over {MAX_LINES} lines, split them along what they hold:\n  {}",
        long.join("\n  ")
    );
}

#[test]
fn no_crate_has_an_import_circle() {
    let root = workspace();
    let mut circles = Vec::new();
    let mut crates: Vec<PathBuf> =
        fs::read_dir(root.join("crates")).unwrap().flatten().map(|e| e.path()).collect();
    crates.sort();
    for krate in crates.iter().filter(|c| c.join("Cargo.toml").exists()) {
        let graph = Graph::of_crate(krate);
        assert!(
            !graph.files.is_empty() || !krate.join("src").exists(),
            "no files read in {}",
            krate.display()
        );
        let show = |files: &[PathBuf]| -> Vec<String> {
            files.iter().map(|f| f.strip_prefix(&root).unwrap().display().to_string()).collect()
        };
        for (circle, others) in graph.circles() {
            let mut line = show(&circle).join(" -> ");
            if !others.is_empty() {
                line += &format!(" (and, in circles with them: {})", show(&others).join(", "));
            }
            circles.push(line);
        }
    }
    assert!(
        circles.is_empty(),
        "import circles (each file names the next; move the shared item to where it belongs):\n  {}",
        circles.join("\n  ")
    );
}

/// The reader finds the circles it is meant to find.
#[test]
fn a_circle_is_found_and_an_ancestor_is_not_one() {
    let dir = std::env::temp_dir().join(format!("structure-test-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(dir.join("src/a")).unwrap();
    let write = |path: &str, text: &str| fs::write(dir.join(path), text).unwrap();
    write("src/lib.rs", "mod a;\nmod b;\nmod c;\npub struct Root;\n");
    write("src/a/mod.rs", "mod inner;\nuse crate::b::B;\n// use crate::c::C;\npub struct A;\n");
    write("src/a/inner.rs", "use super::*;\nuse crate::Root;\nfn f() -> crate::a::A { todo!() }\n");
    write("src/b.rs", "pub struct B;\nfn g() { let _ = \"crate::c::C\"; crate::a::A; }\n");
    write("src/c.rs", "use crate::{a::inner, b::{self, B}};\nmod t {\n    use super::*;\n}\n");
    let graph = Graph::of_crate(&dir);
    let circles = graph.circles();
    let _ = fs::remove_dir_all(&dir);
    let named: Vec<Vec<String>> = circles
        .iter()
        .map(|(c, _)| c.iter().map(|f| f.file_name().unwrap().to_string_lossy().into_owned()).collect())
        .collect();
    assert_eq!(named, [["mod.rs", "b.rs", "mod.rs"]], "{named:?}");
}

/// A crate's files and what each names.
struct Graph {
    /// Module path → file.
    files: BTreeMap<Vec<String>, PathBuf>,
    edges: BTreeMap<PathBuf, BTreeSet<PathBuf>>,
}

impl Graph {
    fn of_crate(krate: &Path) -> Graph {
        let mut graph = Graph { files: BTreeMap::new(), edges: BTreeMap::new() };
        let src = krate.join("src");
        let mut files = Vec::new();
        rust_files(&src, &mut files);
        for file in &files {
            let rel: Vec<String> = file
                .strip_prefix(&src)
                .unwrap()
                .with_extension("")
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            let module = match rel.as_slice() {
                [root] if root == "lib" || root == "main" => Vec::new(),
                [dirs @ .., last] if last == "mod" => dirs.to_vec(),
                // A binary of its own (`src/bin/x.rs`) is a root too.
                [bin, _] if bin == "bin" => continue,
                _ => rel,
            };
            graph.files.insert(module, file.clone());
        }
        let modules: Vec<(Vec<String>, PathBuf)> =
            graph.files.iter().map(|(m, f)| (m.clone(), f.clone())).collect();
        for (module, file) in modules {
            let text = fs::read_to_string(&file).unwrap();
            let mut named = BTreeSet::new();
            for (inline, path) in paths_named(&code_only(&text)) {
                let here: Vec<String> = module.iter().cloned().chain(inline).collect();
                if let Some(target) = graph.resolve(&here, &path) {
                    named.insert(target);
                }
            }
            // Not itself, nor an ancestor (see the module documentation).
            named.retain(|(m, _)| !module.starts_with(m));
            graph.edges.insert(file, named.into_iter().map(|(_, f)| f).collect());
        }
        graph
    }

    /// The file a path names, with its module path, seen from module `here`.
    fn resolve(&self, here: &[String], path: &[String]) -> Option<(Vec<String>, PathBuf)> {
        let (mut at, rest): (Vec<String>, &[String]) = match path.first()?.as_str() {
            "crate" => (Vec::new(), &path[1..]),
            "self" => (here.to_vec(), &path[1..]),
            "super" => {
                let mut at = here.to_vec();
                let mut rest = path;
                while rest.first().is_some_and(|s| s == "super") {
                    at.pop()?;
                    rest = &rest[1..];
                }
                (at, rest)
            }
            // `use c::D` for a child module `c` of this one.
            _ => (here.to_vec(), path),
        };
        let relative = !matches!(path[0].as_str(), "crate" | "self" | "super");
        let base = at.clone();
        let mut found = None;
        for (i, segment) in rest.iter().enumerate() {
            at.push(segment.clone());
            match self.files.get(&at) {
                Some(file) => found = Some((at.clone(), file.clone())),
                None if relative && i == 0 => return None,
                None => break,
            }
        }
        if found.is_none() && !relative {
            // `crate::Name`, `super::*`: the module reached itself, or the
            // file of the nearest module that is one (an inline module's).
            let mut at = base;
            while !at.is_empty() && !self.files.contains_key(&at) {
                at.pop();
            }
            return self.files.get(&at).map(|f| (at, f.clone()));
        }
        found
    }

    /// Every circle, as the files of one strongly connected component (of
    /// more than one file) in an order that follows its edges.
    fn circles(&self) -> Vec<(Vec<PathBuf>, Vec<PathBuf>)> {
        let nodes: Vec<&PathBuf> = self.edges.keys().collect();
        let index: BTreeMap<&PathBuf, usize> = nodes.iter().enumerate().map(|(i, n)| (*n, i)).collect();
        let adj: Vec<Vec<usize>> = nodes
            .iter()
            .map(|n| self.edges[*n].iter().filter_map(|t| index.get(t).copied()).collect())
            .collect();
        let mut circles = Vec::new();
        for component in strongly_connected(&adj) {
            if component.len() < 2 {
                continue;
            }
            // The shortest cycle through its first file, for the message.
            let inside: BTreeSet<usize> = component.iter().copied().collect();
            let start = component[0];
            let mut parent: BTreeMap<usize, usize> = BTreeMap::new();
            let mut queue = std::collections::VecDeque::from([start]);
            let mut walk = vec![start];
            'search: while let Some(v) = queue.pop_front() {
                for &w in adj[v].iter().filter(|w| inside.contains(w)) {
                    if w == start {
                        walk = vec![v];
                        let mut x = v;
                        while x != start {
                            x = parent[&x];
                            walk.push(x);
                        }
                        walk.reverse();
                        break 'search;
                    }
                    if let std::collections::btree_map::Entry::Vacant(e) = parent.entry(w) {
                        e.insert(v);
                        queue.push_back(w);
                    }
                }
            }
            let mut files: Vec<PathBuf> = walk.iter().map(|&i| nodes[i].clone()).collect();
            files.push(nodes[start].clone());
            // The rest of the component, tied to the circle both ways.
            let others: Vec<PathBuf> =
                component.iter().filter(|i| !walk.contains(i)).map(|&i| nodes[i].clone()).collect();
            circles.push((files, others));
        }
        circles
    }
}

/// Tarjan's algorithm, iteratively.
fn strongly_connected(adj: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = adj.len();
    let (mut index, mut low, mut on_stack) = (vec![usize::MAX; n], vec![0; n], vec![false; n]);
    let (mut stack, mut components, mut next) = (Vec::new(), Vec::new(), 0);
    for root in 0..n {
        if index[root] != usize::MAX {
            continue;
        }
        let mut work = vec![(root, 0usize)];
        while let Some(&mut (v, ref mut edge)) = work.last_mut() {
            if *edge == 0 && index[v] == usize::MAX {
                index[v] = next;
                low[v] = next;
                next += 1;
                stack.push(v);
                on_stack[v] = true;
            }
            if let Some(&w) = adj[v].get(*edge) {
                *edge += 1;
                if index[w] == usize::MAX {
                    work.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
                continue;
            }
            work.pop();
            if let Some(&(parent, _)) = work.last() {
                low[parent] = low[parent].min(low[v]);
            }
            if low[v] == index[v] {
                let mut component = Vec::new();
                while let Some(w) = stack.pop() {
                    on_stack[w] = false;
                    component.push(w);
                    if w == v {
                        break;
                    }
                }
                component.sort();
                components.push(component);
            }
        }
    }
    components
}

/// The text with comments, strings and character literals blanked (line
/// breaks kept), so neither a doc link nor a string passes for a path.
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == b'/' && b.get(i + 1) == Some(&b'/') {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if c == b'/' && b.get(i + 1) == Some(&b'*') {
            let mut depth = 0;
            while i < b.len() {
                if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    if b[i] == b'\n' {
                        out.push('\n');
                    }
                    i += 1;
                }
            }
        } else if c == b'r'
            && (b.get(i + 1) == Some(&b'"') || b.get(i + 1) == Some(&b'#'))
            && !ident_before(b, i)
        {
            // A raw string: r"…", r#"…"#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&b'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&b'"') {
                out.push('r');
                i += 1;
                continue;
            }
            j += 1;
            let close: Vec<u8> = std::iter::once(b'"').chain(std::iter::repeat_n(b'#', hashes)).collect();
            while j < b.len() && !b[j..].starts_with(&close) {
                if b[j] == b'\n' {
                    out.push('\n');
                }
                j += 1;
            }
            out.push_str("\"\"");
            i = j + close.len();
        } else if c == b'"' {
            i += 1;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                if b.get(i) == Some(&b'\n') {
                    out.push('\n');
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
        } else if c == b'\'' {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime.
            let end = if b.get(i + 1) == Some(&b'\\') {
                b[i + 2..].iter().position(|&x| x == b'\'').map(|p| i + 2 + p)
            } else if b.get(i + 2) == Some(&b'\'') {
                Some(i + 2)
            } else {
                // Multi-byte UTF-8 characters, then the quote.
                let len = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (b.get(i + 1 + len) == Some(&b'\'') && len > 1).then_some(i + 1 + len)
            };
            match end {
                Some(end) => {
                    out.push_str("' '");
                    i = end + 1;
                }
                None => {
                    out.push('\'');
                    i += 1;
                }
            }
        } else {
            let len = text[i..].chars().next().map_or(1, char::len_utf8);
            out.push_str(&text[i..i + len]);
            i += len;
        }
    }
    out
}

fn ident_before(b: &[u8], i: usize) -> bool {
    i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')
}

/// Every path the code names that could be a module of its crate: the
/// paths of `use` items (trees expanded) and `crate::`/`super::`/`self::`
/// paths anywhere, each with the inline modules it sits in.
fn paths_named(code: &str) -> Vec<(Vec<String>, Vec<String>)> {
    let tokens = tokenize(code);
    let mut out = Vec::new();
    // Inline modules open, with the brace depth their body starts at.
    let mut inline: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last().is_some_and(|(_, d)| *d == depth + 1) {
                    inline.pop();
                }
            }
            "mod" if tokens.get(i + 2).is_some_and(|t| t == "{") => {
                inline.push((tokens[i + 1].clone(), depth + 1));
            }
            "use" => {
                let end = tokens[i..].iter().position(|t| t == ";").map_or(tokens.len(), |p| i + p);
                let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                for path in expand_use(&tokens[i + 1..end]) {
                    out.push((names.clone(), path));
                }
                i = end;
                continue;
            }
            "crate" | "super" | "self" if tokens.get(i + 1).is_some_and(|t| t == "::") => {
                if i > 0 && (tokens[i - 1] == "::" || tokens[i - 1] == "use") {
                    i += 1;
                    continue;
                }
                let mut path = vec![t.to_string()];
                let mut j = i + 1;
                while tokens.get(j).is_some_and(|t| t == "::")
                    && tokens.get(j + 1).is_some_and(|t| is_ident(t))
                {
                    path.push(tokens[j + 1].clone());
                    j += 2;
                }
                let names: Vec<String> = inline.iter().map(|(n, _)| n.clone()).collect();
                out.push((names, path));
                i = j;
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn is_ident(t: &str) -> bool {
    t.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
}

fn tokenize(code: &str) -> Vec<String> {
    let mut tokens = Vec::new();
    let chars: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < chars.len() && (chars[i].is_alphanumeric() || chars[i] == '_') {
                i += 1;
            }
            tokens.push(chars[start..i].iter().collect());
        } else if c == ':' && chars.get(i + 1) == Some(&':') {
            tokens.push("::".into());
            i += 2;
        } else if c.is_whitespace() {
            i += 1;
        } else {
            tokens.push(c.to_string());
            i += 1;
        }
    }
    tokens
}

/// `a::{b, c::{self, D}}` → `a::b`, `a::c`, `a::c::D` (a `pub`/`pub(…)`
/// in front and an `as` rename dropped).
fn expand_use(tokens: &[String]) -> Vec<Vec<String>> {
    let mut rest = tokens;
    if rest.first().is_some_and(|t| t == "pub") {
        rest = &rest[1..];
        if rest.first().is_some_and(|t| t == "(") {
            let close = rest.iter().position(|t| t == ")").unwrap_or(0);
            rest = &rest[close + 1..];
        }
    }
    let mut out = Vec::new();
    tree(rest, &[], &mut out);
    out
}

fn tree(tokens: &[String], prefix: &[String], out: &mut Vec<Vec<String>>) {
    let mut path = prefix.to_vec();
    let mut i = 0;
    while i < tokens.len() {
        let t = tokens[i].as_str();
        match t {
            "::" => {}
            "{" => {
                // Split the group at its top-level commas.
                let mut depth = 0;
                let mut start = i + 1;
                let mut j = i + 1;
                while j < tokens.len() {
                    match tokens[j].as_str() {
                        "{" => depth += 1,
                        "}" if depth == 0 => break,
                        "}" => depth -= 1,
                        "," if depth == 0 => {
                            tree(&tokens[start..j], &path, out);
                            start = j + 1;
                        }
                        _ => {}
                    }
                    j += 1;
                }
                tree(&tokens[start..j.min(tokens.len())], &path, out);
                return;
            }
            "as" => break,
            "self" if !path.is_empty() => {}
            "*" => break,
            _ if is_ident(t) => path.push(t.to_string()),
            _ => break,
        }
        i += 1;
    }
    if !path.is_empty() {
        out.push(path);
    }
}

/// The map stays true to the tree: every module file under a crate's
/// `src/` is named in docs/ARCHITECTURE.md (as `name.rs`, `` `name` ``,
/// `` `name:: `` or `crate::name`), and every `*.rs` file the map names
/// exists.
#[test]
fn the_architecture_map_names_every_module_and_only_files_that_exist() {
    let root = workspace();
    let map = fs::read_to_string(root.join("docs/ARCHITECTURE.md")).unwrap();
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    rust_files(&root.join("fuzz"), &mut files);
    let unnamed: Vec<String> = files
        .iter()
        .filter(|f| {
            let rel = f.strip_prefix(&root).unwrap().to_string_lossy().into_owned();
            rel.contains("/src/") && !rel.contains("/tests/") && !rel.starts_with("fuzz/")
        })
        .filter_map(|f| {
            let stem = f.file_stem()?.to_str()?;
            if ["lib", "main", "mod", "tests"].contains(&stem) {
                return None;
            }
            let named =
                [format!("{stem}.rs"), format!("`{stem}`"), format!("`{stem}::"), format!("::{stem}`")]
                    .iter()
                    .any(|p| map.contains(p.as_str()));
            (!named).then(|| f.strip_prefix(&root).unwrap().display().to_string())
        })
        .collect();
    assert!(
        unnamed.is_empty(),
        "docs/ARCHITECTURE.md does not name these modules (say what each holds):\n  {}",
        unnamed.join("\n  ")
    );
    let present: BTreeSet<String> =
        files.iter().filter_map(|f| Some(f.file_name()?.to_str()?.to_string())).collect();
    let mut absent: Vec<&str> = map
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter(|w| w.len() > 3 && w.ends_with(".rs"))
        // `NAME.rs` in a how-to is a placeholder, not a file.
        .filter(|w| !w.trim_end_matches(".rs").chars().all(|c| c.is_ascii_uppercase() || c == '_'))
        .filter(|w| !present.contains(*w))
        .collect();
    absent.sort();
    absent.dedup();
    assert!(absent.is_empty(), "docs/ARCHITECTURE.md names files that do not exist: {absent:?}");
}
