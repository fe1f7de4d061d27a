//! Document roots in temporary directories.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Content of the files `secret` and `secret.txt` placed *next to* the
/// document root (in its parent directory). No response may ever contain
/// it.
pub const SECRET: &str = "TOP-SECRET-7c1e9b: must never be served";

/// A document root in a fresh temporary directory, deleted on drop.
///
/// Layout: `BASE/root/` is the root to serve, and `BASE/secret` and
/// `BASE/secret.txt` (content [`SECRET`]) sit next to it, so `/../secret`
/// names a real file outside the root. Paths given to the methods are
/// relative to the root and use `/`.
#[derive(Debug)]
pub struct Docroot {
    base: tempfile::TempDir,
    root: PathBuf,
}

impl Default for Docroot {
    fn default() -> Self {
        Docroot::new()
    }
}

impl Docroot {
    /// An empty root (plus the secret files outside it).
    pub fn new() -> Docroot {
        let base = tempfile::Builder::new().prefix("modus-test-").tempdir().expect("create tempdir");
        let root = base.path().join("root");
        fs::create_dir(&root).expect("create root");
        for name in ["secret", "secret.txt"] {
            fs::write(base.path().join(name), SECRET).expect("write secret");
        }
        Docroot { base, root }
    }

    /// The standard fixture most tests use:
    ///
    /// | path | content |
    /// |---|---|
    /// | `index.html` | `<!doctype html><title>root index</title><p>root index</p>\n` |
    /// | `hello.txt` | `Hello, world!\n` |
    /// | `alphabet.txt` | `abcdefghijklmnopqrstuvwxyz` (26 bytes, for ranges) |
    /// | `style.css` | `body { color: red; }\n` |
    /// | `data.unknownext` | 16 bytes `0x00..0x0f` |
    /// | `empty.txt` | empty |
    /// | `dir/index.html` | `<p>dir index</p>\n` |
    /// | `dir/nested/deep.txt` | `deep file\n` |
    /// | `noindex/` | `b.txt`, `a.txt`, `a<b>&"c'.txt`, `sp ace.txt`, `pct%41.txt`, `zdir/`, `adir/` (no index.html) |
    /// | `.env`, `.git/config`, `dir/.hidden` | dotfiles containing [`SECRET`] |
    /// | `link-inside.txt` | symlink → `hello.txt` |
    /// | `link-outside.txt` | symlink → `../secret.txt` (outside the root) |
    /// | `link-dir-outside` | symlink → `..` (the base directory) |
    pub fn standard() -> Docroot {
        let d = Docroot::new();
        d.file("index.html", "<!doctype html><title>root index</title><p>root index</p>\n");
        d.file("hello.txt", "Hello, world!\n");
        d.file("alphabet.txt", "abcdefghijklmnopqrstuvwxyz");
        d.file("style.css", "body { color: red; }\n");
        d.file("data.unknownext", (0u8..16).collect::<Vec<u8>>());
        d.file("empty.txt", "");
        d.file("dir/index.html", "<p>dir index</p>\n");
        d.file("dir/nested/deep.txt", "deep file\n");
        for f in ["b.txt", "a.txt", "a<b>&\"c'.txt", "sp ace.txt", "pct%41.txt"] {
            d.file(&format!("noindex/{f}"), format!("file {f}\n"));
        }
        d.dir("noindex/zdir");
        d.dir("noindex/adir");
        d.file(".env", SECRET);
        d.file(".git/config", SECRET);
        d.file("dir/.hidden", SECRET);
        d.symlink("link-inside.txt", "hello.txt");
        d.symlink("link-outside.txt", "../secret.txt");
        d.symlink("link-dir-outside", "..");
        d
    }

    /// The document root to serve.
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The directory containing the root and the secret files.
    pub fn base(&self) -> &Path {
        self.base.path()
    }

    /// Absolute path of `rel` inside the root.
    pub fn join(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Writes (creates or truncates) file `rel`, creating parent dirs.
    pub fn file(&self, rel: &str, contents: impl AsRef<[u8]>) -> &Self {
        let p = self.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("create parent dirs");
        }
        fs::write(&p, contents).unwrap_or_else(|e| panic!("write {}: {e}", p.display()));
        self
    }

    /// Creates an executable `rel` (a CGI script), with
    /// [`write_executable`](crate::write_executable): no program is started
    /// meanwhile, so none can hold it open for writing when it is run.
    pub fn executable(&self, rel: &str, contents: &str) -> &Self {
        let p = self.join(rel);
        if let Some(parent) = p.parent() {
            fs::create_dir_all(parent).expect("create parent dirs");
        }
        crate::write_executable(&p, contents, 0o755);
        self
    }

    /// Replaces file `rel` atomically (write a temporary file, rename over).
    pub fn replace_file(&self, rel: &str, contents: impl AsRef<[u8]>) -> &Self {
        let p = self.join(rel);
        let tmp = self.base().join(".replace-tmp");
        fs::write(&tmp, contents).expect("write temp file");
        fs::rename(&tmp, &p).unwrap_or_else(|e| panic!("rename onto {}: {e}", p.display()));
        self
    }

    /// Creates directory `rel` (and parents).
    pub fn dir(&self, rel: &str) -> &Self {
        fs::create_dir_all(self.join(rel)).expect("create dir");
        self
    }

    /// Creates a symlink at `rel` pointing to `target` (taken verbatim, so
    /// relative targets are relative to the link's directory).
    pub fn symlink(&self, rel: &str, target: &str) -> &Self {
        let p = self.join(rel);
        std::os::unix::fs::symlink(target, &p)
            .unwrap_or_else(|e| panic!("symlink {} -> {target}: {e}", p.display()));
        self
    }

    /// Sets the modification time of `rel`.
    pub fn set_mtime(&self, rel: &str, t: SystemTime) -> &Self {
        let f = fs::File::options().write(true).open(self.join(rel)).expect("open for set_mtime");
        f.set_modified(t).expect("set mtime");
        self
    }

    /// The modification time of `rel`.
    pub fn mtime(&self, rel: &str) -> SystemTime {
        fs::metadata(self.join(rel)).and_then(|m| m.modified()).expect("mtime")
    }

    /// The current content of `rel`.
    pub fn read(&self, rel: &str) -> Vec<u8> {
        let p = self.join(rel);
        fs::read(&p).unwrap_or_else(|e| panic!("read {}: {e}", p.display()))
    }
}
