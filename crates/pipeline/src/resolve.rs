//! Mapping request paths to files without ever leaving the document root.
//!
//! Two layers, both needed: [`normalize`] rejects or cleans the *text* of
//! the path (decode once, no `..` above the root, no encoded separators),
//! and [`DocRoot`] makes the *kernel* enforce the root while it resolves
//! symlinks, with `openat2(RESOLVE_BENEATH)` relative to a directory fd.
//! Checking a canonicalised path and then opening it by name would be racy
//! (a symlink can be swapped in between), see RFC 9110 §17.3.

use std::borrow::Cow;
use std::fs::{File, Metadata};
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use rustix::fs::{Mode, OFlags, ResolveFlags};
use rustix::io::Errno;

use crate::listing::Entry;

/// Why a request path was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathError {
    /// The path is malformed or tries to escape the root: answer 400.
    BadRequest,
    /// The path names something the server does not serve (a hidden file):
    /// answer 404, as if it did not exist.
    NotFound,
}

/// Decodes a raw request path (percent-encoded, as received, starting with
/// '/') exactly once and normalises it.
///
/// Returns the decoded path: it starts with '/', `.` segments are removed,
/// `..` segments are applied, empty segments (`//`) are merged and a
/// trailing '/' is kept (a trailing `/.` or `/..` also leaves one, as in
/// RFC 3986 §5.2.4).
///
/// # Errors
///
/// [`PathError::BadRequest`] for a path that does not start with '/', a
/// malformed `%` escape, bytes that are not UTF-8 once decoded (this
/// rejects overlong encodings such as `%c0%ae`), control characters, an
/// encoded slash (`%2F`), a backslash in any form, or a `..` that climbs
/// above the root. [`PathError::NotFound`] for a hidden segment (one that
/// starts with '.', except `.well-known`, RFC 8615): it keeps `.git`,
/// `.htaccess` and editor files private (RFC 9110 §17.3).
///
/// A path that is normal already, as most are, is returned as it is,
/// without allocating.
pub fn normalize(raw_path: &str) -> Result<Cow<'_, str>, PathError> {
    if is_normal(raw_path) {
        Ok(Cow::Borrowed(raw_path))
    } else {
        decode_and_normalize(raw_path).map(Cow::Owned)
    }
}

/// Whether [`decode_and_normalize`] would return `raw_path` unchanged:
/// nothing to decode, no empty or dot segment except the empty one after
/// a trailing '/', no hidden segment, no backslash or control character.
/// Segments starting with '.' are all left to the full check, which knows
/// `.well-known`.
fn is_normal(raw_path: &str) -> bool {
    let Some(rest) = raw_path.as_bytes().strip_prefix(b"/") else {
        return false;
    };
    // One pass: a segment is empty or starts with '.' exactly where a '/'
    // or a '.' follows a '/' (a trailing '/' follows a name).
    let mut after_slash = true;
    for &b in rest {
        if b == b'%' || b == b'\\' || b.is_ascii_control() || (after_slash && (b == b'/' || b == b'.')) {
            return false;
        }
        after_slash = b == b'/';
    }
    true
}

fn decode_and_normalize(raw_path: &str) -> Result<String, PathError> {
    if !raw_path.starts_with('/') {
        return Err(PathError::BadRequest);
    }
    let decoded = decode_once(raw_path.as_bytes())?;
    let decoded = String::from_utf8(decoded).map_err(|_| PathError::BadRequest)?;
    if decoded.chars().any(|c| c.is_ascii_control() || c == '\\') {
        // Control characters have no business in a file name and, echoed
        // into a Location header, would split the response (`%0d%0a`).
        // Backslash is a separator on other systems (IIS CVE-2000-0884).
        return Err(PathError::BadRequest);
    }

    let mut segments: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for segment in decoded.split('/').skip(1) {
        trailing_slash = matches!(segment, "" | "." | "..");
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop().ok_or(PathError::BadRequest)?;
            }
            name => segments.push(name),
        }
    }
    if segments.iter().any(|s| is_hidden(s)) {
        return Err(PathError::NotFound);
    }

    let mut out = String::with_capacity(decoded.len());
    for segment in &segments {
        out.push('/');
        out.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        out.push('/');
    }
    Ok(out)
}

/// Percent-decodes once. Decoding again would turn `%252e` into `.`, the
/// double-decoding hole of IIS CVE-2001-0333.
fn decode_once(raw: &[u8]) -> Result<Vec<u8>, PathError> {
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let byte = raw[i];
        if byte != b'%' {
            out.push(byte);
            i += 1;
            continue;
        }
        let hex = |j: usize| raw.get(j).and_then(|&b| (b as char).to_digit(16)).ok_or(PathError::BadRequest);
        let value = ((hex(i + 1)? << 4) | hex(i + 2)?) as u8;
        if value == b'/' {
            // An encoded slash would be a separator the normaliser did not
            // see; nginx and Apache (AllowEncodedSlashes Off) refuse it too.
            return Err(PathError::BadRequest);
        }
        out.push(value);
        i += 3;
    }
    Ok(out)
}

/// Hidden-file policy shared by [`normalize`] and directory listings, so a
/// listing never shows a name that a request for it would refuse.
fn is_hidden(segment: &str) -> bool {
    segment.starts_with('.') && segment != ".well-known"
}

/// How symlinks inside the document root are treated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SymlinkPolicy {
    /// Symlinks are followed only while they resolve inside the root (the
    /// default, RFC 9110 §17.3). On kernels without `openat2` (before Linux
    /// 5.6) no symlink is followed at all.
    #[default]
    Beneath,
    /// Symlinks are followed wherever they point (`--follow-symlinks`).
    Follow,
}

/// An open document root directory.
///
/// Every lookup is relative to the directory's file descriptor, so renaming
/// or replacing the root's path later does not redirect requests.
#[derive(Debug)]
pub struct DocRoot {
    dir: OwnedFd,
    path: PathBuf,
    policy: SymlinkPolicy,
    /// Whether `openat2` can be used; probed once at [`DocRoot::open`].
    openat2: bool,
}

/// Flags for files that will be read. `O_NONBLOCK` keeps `open(2)` from
/// waiting for a writer when the name is a FIFO; [`DocRoot::open_file`]
/// clears it again once the file is known to be regular.
const READ_FLAGS: OFlags =
    OFlags::RDONLY.union(OFlags::CLOEXEC).union(OFlags::NOCTTY).union(OFlags::NONBLOCK);

/// Flags for lookups that only need metadata: `O_PATH` opens nothing, so it
/// neither blocks on FIFOs nor needs read permission.
const PATH_FLAGS: OFlags = OFlags::PATH.union(OFlags::CLOEXEC);

impl DocRoot {
    /// Opens the directory at `path` as a document root.
    ///
    /// # Errors
    ///
    /// Fails if `path` cannot be opened or is not a directory.
    pub fn open(path: &Path, policy: SymlinkPolicy) -> io::Result<DocRoot> {
        let dir = rustix::fs::open(path, OFlags::PATH | OFlags::DIRECTORY | OFlags::CLOEXEC, Mode::empty())?;
        let openat2 = policy == SymlinkPolicy::Beneath
            && match rustix::fs::openat2(&dir, ".", PATH_FLAGS, Mode::empty(), beneath()) {
                Ok(_) => true,
                // ENOSYS before Linux 5.6; EPERM from seccomp filters that
                // predate the syscall (older Docker profiles).
                Err(Errno::NOSYS | Errno::PERM) => false,
                Err(e) => return Err(e.into()),
            };
        Ok(DocRoot { dir, path: std::fs::canonicalize(path)?, policy, openat2 })
    }

    /// The root's canonical absolute path (for display and CGI variables;
    /// lookups never use it).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Opens `rel` (a path from [`normalize`]; a leading '/' is allowed)
    /// relative to the root, never escaping it, and returns the file with
    /// its metadata.
    ///
    /// # Errors
    ///
    /// [`io::ErrorKind::NotFound`] if it does not exist (including a
    /// non-directory used as a directory: ENOTDIR), and
    /// [`io::ErrorKind::PermissionDenied`] if resolving it would leave the
    /// root (EXDEV), hits a refused or looping symlink (ELOOP), or names
    /// something other than a regular file or directory (a FIFO, socket or
    /// device is never served). Callers map these to 404 and 403.
    pub fn open_file(&self, rel: &str) -> io::Result<(File, Metadata)> {
        let file = File::from(self.lookup(rel, READ_FLAGS)?);
        let meta = file.metadata()?;
        if !(meta.is_file() || meta.is_dir()) {
            return Err(io::Error::new(io::ErrorKind::PermissionDenied, "not a regular file or directory"));
        }
        // F_SETFL can only change O_APPEND, O_ASYNC, O_DIRECT, O_NOATIME and
        // O_NONBLOCK, and only O_NONBLOCK was set: so this clears exactly it,
        // and the caller gets ordinary blocking reads on every filesystem
        // (FUSE, for one, passes open flags through to its daemon).
        rustix::fs::fcntl_setfl(&file, OFlags::empty())?;
        Ok((file, meta))
    }

    /// The root directory's descriptor (`O_PATH`).
    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.dir.as_fd()
    }

    /// Whether the last component of `rel` is a symlink (a cached file
    /// reached through one can change under a name no watch of its
    /// directory reports).
    pub fn is_symlink(&self, rel: &str) -> bool {
        let rel = rel.trim_start_matches('/');
        rustix::fs::statat(&self.dir, rel, rustix::fs::AtFlags::SYMLINK_NOFOLLOW)
            .map_or(true, |st| rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink())
    }

    /// Returns the metadata of `rel` without opening it for reading (for
    /// validating cache entries), with the same escape rules and errors as
    /// [`DocRoot::open_file`], except that special files are reported
    /// rather than refused.
    ///
    /// # Errors
    ///
    /// As for [`DocRoot::open_file`].
    pub fn stat(&self, rel: &str) -> io::Result<Metadata> {
        let meta = File::from(self.lookup(rel, PATH_FLAGS)?).metadata()?;
        if meta.is_symlink() {
            // Only the O_NOFOLLOW fallback walk can return a symlink itself
            // (O_PATH | O_NOFOLLOW opens the link); it refuses symlinks.
            return Err(escape_error(Errno::LOOP));
        }
        Ok(meta)
    }

    /// One `stat` relative to the root that follows symlinks anywhere: for
    /// checking that a cached file is unchanged, never for deciding what to
    /// serve. That is safe because the cache compares device and inode with
    /// a file [`open_file`](Self::open_file) opened beneath the root, so a
    /// path that now leads elsewhere cannot match; and it makes a cache hit
    /// cost one system call instead of three.
    pub fn stat_unchecked(&self, rel: &str) -> io::Result<rustix::fs::Stat> {
        let rel = rel.trim_start_matches('/');
        let rel = if rel.is_empty() { "." } else { rel };
        rustix::fs::statat(&self.dir, rel, rustix::fs::AtFlags::empty()).map_err(io::Error::from)
    }

    /// Lists the directory `rel` for a directory listing, skipping entries
    /// a request could not reach: hidden names (the [`normalize`] rule),
    /// names that are not UTF-8 or contain control characters or
    /// backslashes, special files, and symlinks that escape the root or
    /// dangle.
    ///
    /// # Errors
    ///
    /// As for [`DocRoot::open_file`] on `rel`; failures on single entries
    /// only leave them out.
    pub fn read_dir(&self, rel: &str) -> io::Result<Vec<Entry>> {
        let fd = self.lookup(rel, READ_FLAGS | OFlags::DIRECTORY)?;
        let mut dir = rustix::fs::Dir::new(fd)?;
        let base = rel.trim_matches('/');
        let mut entries = Vec::new();
        while let Some(entry) = dir.read() {
            let entry = entry?;
            let Ok(name) = entry.file_name().to_str() else {
                continue;
            };
            if name == "." || name == ".." || is_hidden(name) {
                continue;
            }
            if name.chars().any(|c| c.is_ascii_control() || c == '\\') {
                continue;
            }
            // Stat through the root rather than the listed directory, so a
            // symlink gets the same verdict as a request for it would.
            let Ok(meta) = self.stat(&format!("{base}/{name}")) else {
                continue;
            };
            if !(meta.is_file() || meta.is_dir()) {
                continue;
            }
            entries.push(Entry {
                name: name.to_owned(),
                is_dir: meta.is_dir(),
                len: meta.len(),
                modified: meta.modified()?,
            });
        }
        Ok(entries)
    }

    /// Resolves `rel` below the root with `flags`, by the configured policy.
    fn lookup(&self, rel: &str, flags: OFlags) -> io::Result<OwnedFd> {
        let rel = rel.trim_start_matches('/');
        if rel.split('/').any(|s| s == "..") {
            // `normalize` never produces this; refuse rather than trust
            // every caller, since plain openat would follow it upwards.
            return Err(escape_error(Errno::XDEV));
        }
        let rel = if rel.is_empty() { "." } else { rel };
        let result = match self.policy {
            SymlinkPolicy::Follow => rustix::fs::openat(&self.dir, rel, flags, Mode::empty()),
            SymlinkPolicy::Beneath if self.openat2 => self.open_beneath(rel, flags),
            SymlinkPolicy::Beneath => self.walk_nofollow(rel, flags),
        };
        result.map_err(classify)
    }

    fn open_beneath(&self, rel: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        // EAGAIN means a concurrent rename made the kernel unsure that a
        // `..` inside a symlink stayed beneath the root (openat2(2)); a few
        // retries ride out honest races without looping under an attack.
        let mut attempts = 0;
        loop {
            match rustix::fs::openat2(&self.dir, rel, flags, Mode::empty(), beneath()) {
                Err(Errno::AGAIN) if attempts < 3 => attempts += 1,
                Err(Errno::XDEV) => return self.open_through_absolute_link(rel, flags),
                result => return result,
            }
        }
    }

    /// `RESOLVE_BENEATH` refuses every absolute symlink, even one that
    /// names a file inside the root (`ln -s /srv/www/a.html b.html`): such
    /// a path is resolved to its real path, and when that is inside the
    /// root it is opened beneath the root again, by the path it really has
    /// there — so the kernel still checks the final open, and a link that
    /// leads out, or is changed to while this runs, stays refused.
    fn open_through_absolute_link(&self, rel: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        let real = std::fs::canonicalize(self.path.join(rel)).map_err(|_| Errno::XDEV)?;
        let inside = real.strip_prefix(&self.path).map_err(|_| Errno::XDEV)?;
        let inside = if inside.as_os_str().is_empty() { Path::new(".") } else { inside };
        rustix::fs::openat2(&self.dir, inside, flags, Mode::empty(), beneath())
    }

    /// The pre-`openat2` fallback: one `openat` per component with
    /// `O_NOFOLLOW`, so no symlink is ever followed. `rel` contains no `..`
    /// (checked by `lookup`), so the walk cannot climb out either.
    fn walk_nofollow(&self, rel: &str, flags: OFlags) -> rustix::io::Result<OwnedFd> {
        let mut components = rel.split('/').filter(|c| !c.is_empty());
        let last = components.next_back().unwrap_or(".");
        let mut dir: Option<OwnedFd> = None;
        for component in components {
            let parent = dir.as_ref().unwrap_or(&self.dir);
            let flags = OFlags::PATH | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC;
            let next = rustix::fs::openat(parent, component, flags, Mode::empty())
                .map_err(|e| refine_nofollow(parent, component, e))?;
            dir = Some(next);
        }
        let parent = dir.as_ref().unwrap_or(&self.dir);
        // Splitting dropped a trailing '/', which demands a directory (as
        // the kernel's own resolution does with ENOTDIR).
        let flags = if rel.ends_with('/') { flags | OFlags::DIRECTORY } else { flags };
        rustix::fs::openat(parent, last, flags | OFlags::NOFOLLOW, Mode::empty())
            .map_err(|e| refine_nofollow(parent, last, e))
    }
}

fn beneath() -> ResolveFlags {
    // NO_MAGICLINKS: /proc-style links could point anywhere at all.
    ResolveFlags::BENEATH | ResolveFlags::NO_MAGICLINKS
}

/// `O_DIRECTORY | O_NOFOLLOW` on a symlink fails with ENOTDIR, which would
/// read as "not found"; report a refused symlink as ELOOP (forbidden), as
/// plain `O_NOFOLLOW` does.
fn refine_nofollow(parent: &OwnedFd, component: &str, err: Errno) -> Errno {
    if err != Errno::NOTDIR {
        return err;
    }
    match rustix::fs::statat(parent, component, rustix::fs::AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) if rustix::fs::FileType::from_raw_mode(st.st_mode).is_symlink() => Errno::LOOP,
        _ => err,
    }
}

fn escape_error(errno: Errno) -> io::Error {
    io::Error::new(io::ErrorKind::PermissionDenied, io::Error::from(errno))
}

/// Maps lookup errors to the kinds callers turn into 404 and 403.
fn classify(errno: Errno) -> io::Error {
    match errno {
        Errno::NOENT | Errno::NOTDIR | Errno::NAMETOOLONG => {
            io::Error::new(io::ErrorKind::NotFound, io::Error::from(errno))
        }
        Errno::XDEV | Errno::LOOP => escape_error(errno),
        other => other.into(),
    }
}

#[cfg(test)]
mod tests {
    /// The one-pass [`is_normal`] against its definition, on paths built
    /// from the characters that matter.
    #[test]
    fn is_normal_is_its_definition() {
        fn by_definition(raw_path: &str) -> bool {
            let Some(rest) = raw_path.strip_prefix('/') else {
                return false;
            };
            if rest.is_empty() {
                return true;
            }
            let rest = rest.strip_suffix('/').unwrap_or(rest);
            !raw_path.bytes().any(|b| b == b'%' || b == b'\\' || b.is_ascii_control())
                && rest.split('/').all(|segment| !segment.is_empty() && !segment.starts_with('.'))
        }
        let alphabet = ["/", ".", "a", "%", "\\", "\x7f", "\t", "é", "~"];
        let mut paths = vec![String::new()];
        for _ in 0..5 {
            let longer: Vec<String> =
                paths.iter().flat_map(|p| alphabet.iter().map(move |c| format!("{p}{c}"))).collect();
            paths.extend(longer);
            paths.dedup();
        }
        for path in &paths {
            assert_eq!(super::is_normal(path), by_definition(path), "{path:?}");
        }
    }

    use super::*;
    use std::io::Read;
    use std::os::unix::fs::symlink;

    #[test]
    fn normalize_table() {
        use PathError::{BadRequest, NotFound};
        let cases: &[(&str, Result<&str, PathError>)] = &[
            ("/", Ok("/")),
            ("/index.html", Ok("/index.html")),
            ("/a/./b", Ok("/a/b")),
            ("//a//b/", Ok("/a/b/")),
            ("/a/.", Ok("/a/")),
            ("/a/b/..", Ok("/a/")),
            ("/a/b/../c", Ok("/a/c")),
            ("/a/..", Ok("/")),
            ("/.", Ok("/")),
            ("/caf%C3%A9", Ok("/café")),
            ("/caf%c3%a9", Ok("/café")),
            ("/a%20b", Ok("/a b")),
            ("/100%25", Ok("/100%")),
            // Decoded once: the result is the literal text, a plain name.
            ("/%252e%252e/x", Ok("/%2e%2e/x")),
            ("/%252e%252e%252f", Ok("/%2e%2e%2f")),
            // `..;` is a name here (Tomcat's path parameters are not ours).
            ("/..;/", Err(NotFound)),
            ("/a/..;/b", Err(NotFound)),
            ("/.well-known/acme-challenge/t", Ok("/.well-known/acme-challenge/t")),
            ("/.git/config", Err(NotFound)),
            ("/a/.htaccess", Err(NotFound)),
            ("/%2egit", Err(NotFound)),
            ("/.git/../index.html", Ok("/index.html")),
            ("/../x", Err(BadRequest)),
            ("/..", Err(BadRequest)),
            ("/a/../../x", Err(BadRequest)),
            ("/.%2e/", Err(BadRequest)),
            ("/%2e%2e/", Err(BadRequest)),
            ("/%2e%2e%2f", Err(BadRequest)),
            ("/a%2fb", Err(BadRequest)),
            ("/a%2Fb", Err(BadRequest)),
            ("..%5c", Err(BadRequest)),
            ("/..%5c", Err(BadRequest)),
            ("/a%5cb", Err(BadRequest)),
            ("/a\\b", Err(BadRequest)),
            ("%252e%252e", Err(BadRequest)),
            ("/%c0%ae%c0%ae/", Err(BadRequest)),
            ("/%ff", Err(BadRequest)),
            ("/%00", Err(BadRequest)),
            ("/index.html%00.txt", Err(BadRequest)),
            ("/%0d%0a", Err(BadRequest)),
            ("/a%09b", Err(BadRequest)),
            ("/a%7fb", Err(BadRequest)),
            ("/%zz", Err(BadRequest)),
            ("/%4", Err(BadRequest)),
            ("/%", Err(BadRequest)),
            ("/%g0", Err(BadRequest)),
            ("", Err(BadRequest)),
            ("a/b", Err(BadRequest)),
            ("*", Err(BadRequest)),
            ("http://example.com/", Err(BadRequest)),
        ];
        for (raw, expected) in cases {
            assert_eq!(normalize(raw).as_deref().map_err(|e| *e), *expected, "{raw:?}");
        }
    }

    #[test]
    fn normalize_output_is_stable() {
        for raw in ["/a/./b/../c/", "//x//y", "/caf%C3%A9/", "/a%20b"] {
            let once = normalize(raw).unwrap();
            // Re-normalising the decoded text must not change it, except
            // that a literal '%' would be decoded again; none here.
            assert_eq!(normalize(&once).unwrap(), once);
        }
    }

    #[test]
    fn normalize_invariants_exhaustive() {
        // Every string up to 6 characters over an alphabet chosen to build
        // dot segments, escapes and separators.
        const ALPHABET: &[u8] = b"/.%2eEfF5c";
        let mut inputs = vec![String::from("/")];
        let mut frontier = inputs.clone();
        for _ in 0..5 {
            frontier = frontier
                .iter()
                .flat_map(|s| ALPHABET.iter().map(move |&c| format!("{s}{}", c as char)))
                .collect();
            inputs.extend(frontier.iter().cloned());
        }
        for raw in &inputs {
            let normalized = normalize(raw);
            assert_eq!(
                normalized.as_deref().map_err(|e| *e),
                decode_and_normalize(raw).as_deref().map_err(|e| *e),
                "{raw:?}: the shortcut for normal paths changes nothing"
            );
            let Ok(path) = normalized else { continue };
            assert!(path.starts_with('/'), "{raw:?} -> {path:?}");
            assert!(!path.contains("//") && !path.contains('\\'), "{raw:?} -> {path:?}");
            assert!(
                path.split('/').all(|seg| seg != "." && seg != ".." && !is_hidden(seg)),
                "{raw:?} -> {path:?}"
            );
        }
    }

    struct Fixture {
        _tmp: tempfile::TempDir,
        root: PathBuf,
    }

    /// root/{index.html, a/b.txt, sub/, link-in -> a/b.txt,
    /// dirlink-in -> a, up-link -> ../outside.txt, abs-link -> outside.txt,
    /// dir-escape -> .., fifo}; outside.txt next to root.
    fn fixture() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let outside = tmp.path().join("outside.txt");
        std::fs::create_dir_all(root.join("a")).unwrap();
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("index.html"), "hello").unwrap();
        std::fs::write(root.join("a/b.txt"), "nested").unwrap();
        std::fs::write(&outside, "secret").unwrap();
        symlink("a/b.txt", root.join("link-in")).unwrap();
        symlink("a", root.join("dirlink-in")).unwrap();
        symlink("../outside.txt", root.join("up-link")).unwrap();
        symlink(&outside, root.join("abs-link")).unwrap();
        symlink("..", root.join("dir-escape")).unwrap();
        // Absolute links that name places inside the root.
        symlink(root.join("a/b.txt"), root.join("abs-link-in")).unwrap();
        symlink(root.join("a"), root.join("abs-dirlink-in")).unwrap();
        rustix::fs::mknodat(
            rustix::fs::CWD,
            root.join("fifo"),
            rustix::fs::FileType::Fifo,
            Mode::from_raw_mode(0o644),
            0,
        )
        .unwrap();
        Fixture { _tmp: tmp, root }
    }

    fn read(root: &DocRoot, rel: &str) -> io::Result<String> {
        let (mut file, meta) = root.open_file(rel)?;
        assert!(meta.is_file());
        let mut s = String::new();
        file.read_to_string(&mut s)?;
        Ok(s)
    }

    fn kind<T: std::fmt::Debug>(r: io::Result<T>) -> io::ErrorKind {
        r.unwrap_err().kind()
    }

    /// The three ways of resolving, as DocRoots over the same fixture.
    fn roots(f: &Fixture) -> [DocRoot; 3] {
        let beneath = DocRoot::open(&f.root, SymlinkPolicy::Beneath).unwrap();
        assert!(beneath.openat2, "kernel 5.6+ expected to have openat2");
        let mut walk = DocRoot::open(&f.root, SymlinkPolicy::Beneath).unwrap();
        walk.openat2 = false;
        let follow = DocRoot::open(&f.root, SymlinkPolicy::Follow).unwrap();
        [beneath, walk, follow]
    }

    #[test]
    fn plain_nested_and_directory() {
        let f = fixture();
        for root in roots(&f) {
            assert_eq!(read(&root, "/index.html").unwrap(), "hello");
            assert_eq!(read(&root, "index.html").unwrap(), "hello");
            assert_eq!(read(&root, "/a/b.txt").unwrap(), "nested");
            let (_, meta) = root.open_file("/a/").unwrap();
            assert!(meta.is_dir());
            let (_, meta) = root.open_file("/").unwrap();
            assert!(meta.is_dir());
            assert_eq!(root.stat("/a/b.txt").unwrap().len(), 6);
            assert!(root.stat("/sub").unwrap().is_dir());
        }
    }

    #[test]
    fn missing_is_not_found() {
        let f = fixture();
        for root in roots(&f) {
            assert_eq!(kind(root.open_file("/nope")), io::ErrorKind::NotFound);
            assert_eq!(kind(root.open_file("/nope/x")), io::ErrorKind::NotFound);
            // ENOTDIR: a file used as a directory.
            assert_eq!(kind(root.open_file("/index.html/x")), io::ErrorKind::NotFound);
            assert_eq!(kind(root.stat("/index.html/x")), io::ErrorKind::NotFound);
            assert_eq!(kind(root.open_file("/index.html/")), io::ErrorKind::NotFound);
            assert_eq!(kind(root.stat("/index.html/")), io::ErrorKind::NotFound);
        }
    }

    #[test]
    fn dotdot_is_refused_even_if_normalize_was_skipped() {
        let f = fixture();
        for root in roots(&f) {
            assert_eq!(kind(root.open_file("/../outside.txt")), io::ErrorKind::PermissionDenied);
            assert_eq!(kind(root.stat("a/../../outside.txt")), io::ErrorKind::PermissionDenied);
        }
    }

    #[test]
    fn beneath_allows_inside_links_and_refuses_escapes() {
        let f = fixture();
        let [beneath, _, _] = roots(&f);
        assert_eq!(read(&beneath, "/link-in").unwrap(), "nested");
        assert_eq!(read(&beneath, "/dirlink-in/b.txt").unwrap(), "nested");
        assert_eq!(read(&beneath, "/abs-link-in").unwrap(), "nested", "an absolute link inside the root");
        assert_eq!(read(&beneath, "/abs-dirlink-in/b.txt").unwrap(), "nested");
        assert!(beneath.stat("/abs-dirlink-in/").unwrap().is_dir());
        for escape in ["/up-link", "/abs-link", "/dir-escape/outside.txt", "/dir-escape/"] {
            assert_eq!(kind(beneath.open_file(escape)), io::ErrorKind::PermissionDenied, "{escape}");
            assert_eq!(kind(beneath.stat(escape)), io::ErrorKind::PermissionDenied, "{escape}");
        }
    }

    #[test]
    fn fallback_walk_refuses_all_symlinks() {
        let f = fixture();
        let [_, walk, _] = roots(&f);
        for link in [
            "/link-in",
            "/dirlink-in/",
            "/dirlink-in/b.txt",
            "/up-link",
            "/abs-link",
            "/abs-link-in",
            "/dir-escape/outside.txt",
        ] {
            assert_eq!(kind(walk.open_file(link)), io::ErrorKind::PermissionDenied, "{link}");
            assert_eq!(kind(walk.stat(link)), io::ErrorKind::PermissionDenied, "{link}");
        }
    }

    #[test]
    fn follow_goes_anywhere() {
        let f = fixture();
        let [_, _, follow] = roots(&f);
        assert_eq!(read(&follow, "/link-in").unwrap(), "nested");
        assert_eq!(read(&follow, "/up-link").unwrap(), "secret");
        assert_eq!(read(&follow, "/abs-link").unwrap(), "secret");
        assert_eq!(read(&follow, "/dir-escape/outside.txt").unwrap(), "secret");
    }

    #[test]
    fn fifo_does_not_block_and_is_refused() {
        let f = fixture();
        for root in roots(&f) {
            // Without O_NONBLOCK this open would wait forever for a writer.
            assert_eq!(kind(root.open_file("/fifo")), io::ErrorKind::PermissionDenied);
            let meta = root.stat("/fifo").unwrap();
            assert!(!meta.is_file() && !meta.is_dir());
        }
    }

    #[test]
    fn opened_file_is_blocking() {
        let f = fixture();
        let [beneath, _, _] = roots(&f);
        let (file, _) = beneath.open_file("/index.html").unwrap();
        let flags = rustix::fs::fcntl_getfl(&file).unwrap();
        assert!(!flags.contains(OFlags::NONBLOCK));
    }

    #[test]
    fn read_dir_lists_reachable_entries() {
        let f = fixture();
        std::fs::write(f.root.join(".hidden"), "x").unwrap();
        std::fs::create_dir(f.root.join(".git")).unwrap();
        std::fs::create_dir(f.root.join(".well-known")).unwrap();
        std::fs::write(f.root.join("bad\\name"), "x").unwrap();
        let [beneath, walk, follow] = roots(&f);
        let names = |root: &DocRoot, rel: &str| {
            let mut names: Vec<String> = root.read_dir(rel).unwrap().into_iter().map(|e| e.name).collect();
            names.sort();
            names
        };
        assert_eq!(
            names(&beneath, "/"),
            [
                ".well-known",
                "a",
                "abs-dirlink-in",
                "abs-link-in",
                "dirlink-in",
                "index.html",
                "link-in",
                "sub"
            ]
        );
        assert_eq!(names(&walk, "/"), [".well-known", "a", "index.html", "sub"]);
        assert_eq!(
            names(&follow, "/"),
            [
                ".well-known",
                "a",
                "abs-dirlink-in",
                "abs-link",
                "abs-link-in",
                "dir-escape",
                "dirlink-in",
                "index.html",
                "link-in",
                "sub",
                "up-link"
            ]
        );
        let entries = beneath.read_dir("/a/").unwrap();
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].name, "b.txt");
        assert!(!entries[0].is_dir);
        assert_eq!(entries[0].len, 6);
        let linked = beneath.read_dir("/dirlink-in/").unwrap();
        assert_eq!(linked, entries);
        assert!(beneath.read_dir("/").unwrap().iter().any(|e| e.name == "sub" && e.is_dir));
        assert_eq!(kind(beneath.read_dir("/index.html")), io::ErrorKind::NotFound);
        assert_eq!(kind(beneath.read_dir("/dir-escape/")), io::ErrorKind::PermissionDenied);
    }

    #[test]
    fn open_rejects_non_directory_root() {
        let f = fixture();
        assert!(DocRoot::open(&f.root.join("index.html"), SymlinkPolicy::Beneath).is_err());
        assert!(DocRoot::open(&f.root.join("missing"), SymlinkPolicy::Beneath).is_err());
        let root = DocRoot::open(&f.root, SymlinkPolicy::default()).unwrap();
        assert_eq!(root.path(), std::fs::canonicalize(&f.root).unwrap());
    }
}
