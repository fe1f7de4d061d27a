use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, Read};
use std::path::Path;
use std::sync::Arc;
use std::time::SystemTime;

use transport::{Chunk, Data};

use crate::cache::{Body, Cache, Entry, Hit, Identity};
use crate::flights::{Boarding, Landed};
use crate::resolve::{DocRoot, SymlinkPolicy};
use crate::{conditional, listing, Settings};

/// Whether the pipeline may wait for the disk while answering.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Blocking {
    /// Open and read files as needed.
    Allowed,
    /// Answer only from memory (a validated cache entry, an embedded file,
    /// an error decided by the request alone); otherwise give up.
    Avoid,
}

/// A file compiled into the binary.
#[derive(Clone, Copy, Debug)]
pub struct EmbeddedFile {
    /// URL path, starting with '/'.
    pub path: &'static str,
    /// Its content.
    pub bytes: &'static [u8],
}

/// What is served: a directory on disk, or files compiled into the binary.
#[derive(Debug)]
pub enum Site {
    /// A document root directory.
    Dir(DocRoot),
    /// The embedded demo site.
    Embedded(Embedded),
}

/// Embedded files, ready to serve (validators computed once at start).
#[derive(Debug)]
pub struct Embedded {
    files: HashMap<&'static str, Arc<Entry>>,
    dirs: HashSet<String>,
}

/// A representation ready to be sent.
pub(crate) enum Resource {
    /// From the cache (bytes or a kept descriptor) or an embedded file.
    Cached(Arc<Entry>),
    /// On disk, too big for the cache: sent with `sendfile`.
    File { file: Arc<File>, identity: Identity, etag: String, content_type: String },
}

impl Resource {
    fn identity(&self) -> &Identity {
        match self {
            Resource::Cached(e) => &e.identity,
            Resource::File { identity, .. } => identity,
        }
    }

    pub fn len(&self) -> u64 {
        self.identity().len
    }

    /// Which file it is (device and inode), whatever the path it was found by.
    pub fn document(&self) -> crate::schedule::Document {
        let identity = self.identity();
        crate::schedule::Document { dev: identity.dev, ino: identity.ino }
    }

    pub fn modified(&self) -> SystemTime {
        self.identity().modified
    }

    pub fn etag(&self) -> &str {
        match self {
            Resource::Cached(e) => &e.etag,
            Resource::File { etag, .. } => etag,
        }
    }

    pub fn content_type(&self) -> &str {
        match self {
            Resource::Cached(e) => &e.content_type,
            Resource::File { content_type, .. } => content_type,
        }
    }

    /// `Last-Modified` value; formatted once per cache entry.
    pub fn last_modified(&self) -> std::borrow::Cow<'_, str> {
        match self {
            Resource::Cached(e) => e.last_modified.as_str().into(),
            Resource::File { identity, .. } => h1::format_http_date(identity.modified).into(),
        }
    }

    /// The fields of a response that sends it whole: type, length and
    /// the validators. A cache entry has them encoded already.
    pub fn whole_fields(&self, head: &mut h1::ResponseHead) {
        match self {
            Resource::Cached(e) => {
                head.lines(&e.whole_fields);
            }
            Resource::File { identity, content_type, .. } => {
                head.header("Content-Type", content_type).header_u64("Content-Length", identity.len);
                self.validators(head);
            }
        }
    }

    /// `Last-Modified`, `ETag` and `Accept-Ranges`, which follow the
    /// framing fields of a 200 or 206.
    pub fn validators(&self, head: &mut h1::ResponseHead) {
        head.header("Last-Modified", self.last_modified().as_ref())
            .header("ETag", self.etag())
            .header("Accept-Ranges", "bytes");
    }

    /// The bytes `range` of the representation as a body chunk.
    pub fn chunk(&self, range: std::ops::Range<u64>) -> Chunk {
        match self {
            Resource::Cached(e) => match &e.body {
                Body::Bytes(bytes) => {
                    Chunk::Bytes(Data::Shared(bytes.clone(), range.start as usize..range.end as usize))
                }
                Body::File(file) => {
                    Chunk::File { file: file.clone(), offset: range.start, len: range.end - range.start }
                }
            },
            Resource::File { file, .. } => {
                Chunk::File { file: file.clone(), offset: range.start, len: range.end - range.start }
            }
        }
    }
}

/// Why a path exists but is not served.
#[derive(Debug)]
pub(crate) enum Refusal {
    /// A directory without `index.html`, and listings are off.
    NoIndex,
    /// A FIFO, socket or device: never served.
    NotRegular,
    /// The system said no: permissions, or a symlink out of ROOT or in a loop.
    Denied(io::Error),
}

/// The outcome of looking a normalised path up.
pub(crate) enum Found {
    Resource(Resource),
    /// A directory named without its trailing slash (RFC 9110 has no rule;
    /// every server redirects so relative links inside resolve).
    AddSlash,
    Listing(String),
    /// 403, and why (for the error log).
    Forbidden(Refusal),
    Missing,
    Failed(io::Error),
}

impl Site {
    /// Serves the directory `root`.
    pub fn dir(root: &Path, follow_symlinks: bool) -> io::Result<Site> {
        let policy = if follow_symlinks { SymlinkPolicy::Follow } else { SymlinkPolicy::Beneath };
        Ok(Site::Dir(DocRoot::open(root, policy)?))
    }

    /// Serves `files`; `/x/` serves `/x/index.html`.
    pub fn embedded(files: &[EmbeddedFile]) -> Site {
        let started = SystemTime::now();
        let mut map = HashMap::new();
        let mut dirs = HashSet::new();
        for f in files {
            // Embedded files have no inode: a content hash stands in, so the
            // ETag changes exactly when a new binary ships new bytes.
            let hash = fnv1a(f.bytes);
            let identity =
                Identity { dev: 0, ino: hash, len: f.bytes.len() as u64, modified: started, changed: (0, 0) };
            let etag = conditional::etag(hash, identity.len, SystemTime::UNIX_EPOCH);
            let entry = Entry::new(identity, Body::Bytes(Arc::from(f.bytes)), etag, content_type(f.path));
            map.insert(f.path, Arc::new(entry));
            let mut dir = f.path;
            while let Some(i) = dir.rfind('/') {
                dir = &dir[..i];
                if !dir.is_empty() {
                    dirs.insert(dir.to_string());
                }
            }
        }
        Site::Embedded(Embedded { files: map, dirs })
    }

    /// The root directory's descriptor, for a site on disk.
    pub(crate) fn root_fd(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        match self {
            Site::Dir(root) => Some(root.fd()),
            Site::Embedded(_) => None,
        }
    }

    /// Finds what `path` names, and whether it came from memory (a cache
    /// hit or an embedded file). With [`Blocking::Avoid`], `None` means the
    /// answer needs the disk beyond one `stat` of a cached file.
    pub(crate) fn lookup(
        &self,
        path: &str,
        cache: &Cache,
        settings: &Settings,
        blocking: Blocking,
    ) -> Option<(Found, bool)> {
        Some(match self {
            Site::Embedded(site) => {
                let key = if path.ends_with('/') { format!("{path}index.html") } else { path.to_string() };
                match site.files.get(key.as_str()) {
                    Some(entry) => (Found::Resource(Resource::Cached(entry.clone())), true),
                    None if site.dirs.contains(path) => (Found::AddSlash, false),
                    None => (Found::Missing, false),
                }
            }
            Site::Dir(root) => {
                // The hot path: a cached file still the same on disk costs one `stat`.
                if let Some(entry) = cached(root, path, cache) {
                    return Some((Found::Resource(Resource::Cached(entry)), true));
                }
                if blocking == Blocking::Avoid {
                    return None;
                }
                if !settings.schedule.groups() {
                    return Some((lookup_dir(root, path, cache, settings), false));
                }
                // One read for every request that misses on it meanwhile.
                match cache.flights.board(path) {
                    Boarding::Leader(leader) => {
                        let found = lookup_dir(root, path, cache, settings);
                        leader.land(match &found {
                            Found::Resource(Resource::Cached(entry)) => Landed::Entry(entry.clone()),
                            Found::Failed(e) => Landed::Failed(e.kind(), e.to_string()),
                            _ => Landed::Nothing,
                        });
                        (found, false)
                    }
                    Boarding::Followed(Landed::Entry(entry)) => {
                        (Found::Resource(Resource::Cached(entry)), true)
                    }
                    Boarding::Followed(Landed::Failed(kind, why)) => {
                        (Found::Failed(io::Error::new(kind, why)), false)
                    }
                    Boarding::Followed(Landed::Nothing) => (lookup_dir(root, path, cache, settings), false),
                }
            }
        })
    }
}

impl Site {
    /// A precompressed sibling (`FILE.br`, `--precompressed`) of the file
    /// at `path`, itself looked up as a file of the site (so the cache
    /// holds and validates it like any other): `Some(None)` if there is
    /// none, `None` if finding out needs the disk and `blocking` says no.
    pub(crate) fn sibling(
        &self,
        path: &str,
        cache: &Cache,
        settings: &Settings,
        blocking: Blocking,
    ) -> Option<Option<Resource>> {
        let found = match self {
            Site::Embedded(site) => site.files.get(path).map(|e| Resource::Cached(e.clone())),
            Site::Dir(root) => {
                if let Some(entry) = cached(root, path, cache) {
                    return Some(Some(Resource::Cached(entry)));
                }
                // Most files have no sibling: that answer costs one `stat`.
                if let Err(e) = root.stat_unchecked(path) {
                    if e.kind() == io::ErrorKind::NotFound {
                        return Some(None);
                    }
                }
                if blocking == Blocking::Avoid {
                    return None;
                }
                match lookup_dir(root, path, cache, settings) {
                    Found::Resource(resource) => Some(resource),
                    _ => None,
                }
            }
        };
        Some(found)
    }
}

/// The cache entry for `path` if the file on disk is still that version:
/// the watch's word for it, or else a `stat`.
fn cached(root: &DocRoot, path: &str, cache: &Cache) -> Option<Arc<Entry>> {
    let entry = match cache.lookup(path)? {
        Hit::Fresh(entry) => return Some(entry),
        Hit::Check(entry) => entry,
    };
    let st = root.stat_unchecked(path).ok()?;
    if !rustix::fs::FileType::from_raw_mode(st.st_mode).is_file() || Identity::of(&st) != entry.identity {
        return None;
    }
    cache.hit(&entry);
    Some(entry)
}

fn lookup_dir(root: &DocRoot, path: &str, cache: &Cache, settings: &Settings) -> Found {
    let meta = match root.stat(path) {
        Ok(meta) => meta,
        Err(e) => return from_io(e),
    };
    if meta.is_dir() {
        if !path.ends_with('/') {
            return Found::AddSlash;
        }
        let index = format!("{path}index.html");
        match root.stat(&index) {
            Ok(m) if m.is_file() => return load_file(root, &index, cache),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return from_io(e),
        }
        if !settings.browse {
            return Found::Forbidden(Refusal::NoIndex);
        }
        return match root.read_dir(path) {
            Ok(mut entries) => Found::Listing(listing::render(path, &mut entries)),
            Err(e) => from_io(e),
        };
    }
    if !meta.is_file() {
        return Found::Forbidden(Refusal::NotRegular);
    }
    load_file(root, path, cache)
}

/// Opens a file beneath the root; reads it into the cache if it is small
/// enough, else keeps the descriptor for `sendfile`.
fn load_file(root: &DocRoot, path: &str, cache: &Cache) -> Found {
    // Before the open: a change from here on is seen (see `watch.rs`).
    let ticket = cache.ticket(path);
    let (mut file, meta) = match root.open_file(path) {
        Ok(opened) => opened,
        Err(e) => return from_io(e),
    };
    if !meta.is_file() {
        return Found::Forbidden(Refusal::NotRegular);
    }
    // Validators come from the descriptor actually served, not an earlier stat.
    let (identity, links) = match rustix::fs::fstat(&file) {
        Ok(st) => (Identity::of(&st), st.st_nlink),
        Err(e) => return Found::Failed(e.into()),
    };
    let ticket = ticket.filter(|t| t.watched).filter(|_| {
        if links > 1 || root.is_symlink(path) {
            cache.unwatchable("inotify-link", path);
            false
        } else if crate::watch::remote_filesystem(&file) {
            cache.unwatchable("inotify-remote", path);
            false
        } else {
            true
        }
    });
    let etag = conditional::etag(identity.ino, identity.len, identity.modified);
    let content_type = content_type(path);
    if cache.admits(identity.len) && !cache.holds_bytes(identity.len) {
        cache.note_miss();
        let entry = Arc::new(Entry::new(identity, Body::File(Arc::new(file)), etag, content_type));
        cache.insert(path, entry.clone(), ticket);
        return Found::Resource(Resource::Cached(entry));
    }
    if cache.admits(identity.len) {
        cache.note_miss();
        let mut bytes = Vec::with_capacity(identity.len as usize);
        if let Err(e) = (&mut file).take(identity.len).read_to_end(&mut bytes) {
            return Found::Failed(e);
        }
        if bytes.len() as u64 == identity.len {
            let entry = Arc::new(Entry::new(identity, Body::Bytes(bytes.into()), etag, content_type));
            cache.insert(path, entry.clone(), ticket);
            return Found::Resource(Resource::Cached(entry));
        }
        // The file shrank while we read it: serve it from disk this once
        // rather than cache a copy that matches no version of it.
    }
    Found::Resource(Resource::File { file: Arc::new(file), identity, etag, content_type })
}

fn from_io(e: io::Error) -> Found {
    match e.kind() {
        io::ErrorKind::NotFound | io::ErrorKind::NotADirectory | io::ErrorKind::InvalidFilename => {
            Found::Missing
        }
        io::ErrorKind::PermissionDenied => Found::Forbidden(Refusal::Denied(e)),
        _ => Found::Failed(e),
    }
}

/// The media type for a path; text gets `charset=utf-8` because browsers
/// otherwise guess (RFC 9110 §8.3.1 leaves the default to the media type).
pub(crate) fn content_type(path: &str) -> String {
    let mime = mime_guess::from_path(path).first_or_octet_stream();
    let essence = mime.essence_str();
    if mime.type_() == mime_guess::mime::TEXT || essence == "application/javascript" {
        format!("{essence}; charset=utf-8")
    } else {
        essence.to_string()
    }
}

/// FNV-1a: a fast, stable hash for validators and multipart boundaries (not for security).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}
