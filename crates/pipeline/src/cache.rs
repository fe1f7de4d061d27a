use std::collections::HashMap;
use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, RwLock};
use std::time::SystemTime;

use crate::compress::Coding;
use crate::errorlog::ErrorLog;
use crate::stats::CacheSnap;
use crate::watch::{Stale, Ticket, Watch};

/// What identifies one version of a file on disk. A change to any field —
/// a rewrite, a `touch`, a rename over it — makes the cached copy stale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Identity {
    pub dev: u64,
    pub ino: u64,
    pub len: u64,
    pub modified: SystemTime,
    /// The inode's change time: moved by every write and every change of
    /// its times, so a file rewritten in place with its size and mtime
    /// put back (`rsync --inplace --times`) is still seen as changed.
    pub changed: (i64, i64),
}

impl Identity {
    /// Always taken from a raw `stat`, for the open file and for the path
    /// alike, so both sides of a comparison encode the device the same way.
    pub fn of(st: &rustix::fs::Stat) -> Identity {
        let mtime = std::time::Duration::new(st.st_mtime.max(0) as u64, st.st_mtime_nsec as u32);
        Identity {
            dev: st.st_dev,
            ino: st.st_ino,
            len: st.st_size.max(0) as u64,
            modified: SystemTime::UNIX_EPOCH + mtime,
            changed: (st.st_ctime, st.st_ctime_nsec as i64),
        }
    }
}

/// Where responses go out with `sendfile`, cached files up to this size are
/// kept as bytes and leave with the head in one `writev`; larger ones are
/// kept as an open descriptor. `sendfile` hands the page cache's pages to
/// the socket, which saves the copy into the socket buffer that a `writev`
/// from memory makes: on this machine (BENCHMARKS.md, "Why the code is as
/// it is") it costs the server less CPU from 16 KiB up — 8.3 against 11.1 µs
/// per 50 KB keep-alive request — and the same at 8 KiB. (An earlier
/// measurement put the crossover above 115 KB; nginx sends every file with
/// `sendfile`, lighttpd too.)
pub const INLINE_MAX_SENDFILE: u64 = 16 << 10;

/// Where a file would be read to be sent (TLS encrypts from memory; `uring`
/// sends from its own buffers), a copy in memory saves that read on every
/// request: cached files up to this size are kept as bytes. The cache's byte
/// budget bounds what this holds — per process, so a prefork server holds it
/// once per child.
pub const INLINE_MAX_COPY: u64 = 256 << 10;

/// How a cached file's content is held.
#[derive(Debug)]
pub(crate) enum Body {
    /// The bytes themselves.
    Bytes(Arc<[u8]>),
    /// An open descriptor (nginx's `open_file_cache`): no `open`/`close`
    /// per request, and the page cache holds the bytes.
    File(Arc<std::fs::File>),
}

/// A cached file: its content and everything the response head needs, so
/// a hit costs one `writev` (or `writev` + `sendfile`), plus a `stat` when
/// no watch vouches for it.
#[derive(Debug)]
pub(crate) struct Entry {
    pub identity: Identity,
    pub body: Body,
    pub etag: String,
    pub last_modified: String,
    pub content_type: String,
    /// `Content-Type`, `Content-Length`, `Last-Modified`, `ETag` and
    /// `Accept-Ranges` of a 200, encoded once (see `Resource::whole_fields`).
    pub whole_fields: h1::FieldLines,
    last_used: AtomicU64,
    /// The directory watch will report any change to it (see `watch.rs`),
    /// so a hit needs no `stat`.
    watched: AtomicBool,
    /// The file encoded with each coding (`--compress`), made the first
    /// time a client asks for it; `None` inside: not worth sending (no
    /// smaller, or the encoder failed).
    variants: [OnceLock<Option<Variant>>; 3],
    /// Bytes of the variants, counted in the cache's budget with the file's.
    variant_bytes: AtomicU64,
    /// Per coding: its encoding was handed to the background encoder
    /// ([`encode_aside`](Self::encode_aside)).
    aside: [AtomicBool; 3],
    /// Per coding: made aside, not yet counted in the budget (the encoder
    /// holds no cache: the next request that uses it counts it).
    uncharged: [AtomicBool; 3],
}

/// A cached file in one content coding: encoded once, served as often as
/// asked, like the identity bytes.
#[derive(Debug)]
pub(crate) struct Variant {
    pub coding: Coding,
    pub bytes: Arc<[u8]>,
    /// The file's tag with the coding appended: a different
    /// representation needs a different strong validator (RFC 9110 §8.8.3).
    pub etag: String,
    /// The fields of its 200, as `Entry::whole_fields`, with
    /// `Content-Encoding` and `Vary`.
    pub whole_fields: h1::FieldLines,
}

impl Entry {
    pub fn new(identity: Identity, body: Body, etag: String, content_type: String) -> Entry {
        let last_modified = h1::format_http_date(identity.modified);
        let mut whole_fields = h1::FieldLines::default();
        whole_fields
            .header("Content-Type", &content_type)
            .header_u64("Content-Length", identity.len)
            .header("Last-Modified", &last_modified)
            .header("ETag", &etag)
            .header("Accept-Ranges", "bytes");
        Entry {
            last_modified,
            whole_fields,
            identity,
            body,
            etag,
            content_type,
            last_used: AtomicU64::new(0),
            watched: AtomicBool::new(false),
            variants: Default::default(),
            variant_bytes: AtomicU64::new(0),
            aside: Default::default(),
            uncharged: Default::default(),
        }
    }

    /// Bytes it holds in the cache's budget: the file's and its variants'.
    fn size(&self) -> u64 {
        self.identity.len + self.variant_bytes.load(Ordering::Relaxed)
    }

    /// What it holds: budget bytes, bytes in memory, open descriptors.
    fn held(&self) -> [u64; 3] {
        let variants = self.variant_bytes.load(Ordering::Relaxed);
        match self.body {
            Body::Bytes(_) => [self.size(), self.identity.len + variants, 0],
            Body::File(_) => [self.size(), variants, 1],
        }
    }

    /// The variant in `coding` if it was made already: `None` if not yet,
    /// `Some(None)` if it is not worth sending.
    pub fn variant_made(&self, coding: Coding) -> Option<Option<&Variant>> {
        self.variants[coding.index()].get().map(Option::as_ref)
    }

    /// The variant in `coding`, made now if it was not yet (a thread that
    /// asks meanwhile waits for this one's, so a file is encoded once),
    /// and counted in `cache`'s budget if the entry is there under `key`.
    /// `None`: not worth sending.
    pub fn variant(self: &Arc<Self>, coding: Coding, cache: &Cache, key: &str) -> Option<&Variant> {
        let i = coding.index();
        let variant = self.variants[i]
            .get_or_init(|| {
                let variant = self.encode(coding)?;
                cache.charge(key, self, variant.bytes.len() as u64);
                Some(variant)
            })
            .as_ref();
        if let Some(made) = variant.filter(|_| self.uncharged[i].swap(false, Ordering::Relaxed)) {
            cache.charge(key, self, made.bytes.len() as u64);
        }
        variant
    }

    /// Has `coding`'s variant made on the background encoder, once, for a
    /// thread that must not spend the time (an event loop): until it is
    /// made, requests are answered with the file as it is.
    pub fn encode_aside(self: &Arc<Self>, coding: Coding) {
        let i = coding.index();
        if self.aside[i].swap(true, Ordering::Relaxed) {
            return;
        }
        let entry = Arc::clone(self);
        crate::compress::in_background(Box::new(move || {
            let mut made = false;
            entry.variants[i].get_or_init(|| {
                made = true;
                entry.encode(coding)
            });
            if made && entry.variants[i].get().is_some_and(Option::is_some) {
                entry.uncharged[i].store(true, Ordering::Relaxed);
            }
        }));
    }

    fn encode(&self, coding: Coding) -> Option<Variant> {
        let encoded = match &self.body {
            Body::Bytes(bytes) => coding.encode(bytes),
            Body::File(file) => {
                use std::os::unix::fs::FileExt;
                let mut bytes = vec![0; self.identity.len as usize];
                file.read_exact_at(&mut bytes, 0).and_then(|()| coding.encode(&bytes))
            }
        }
        .ok()?;
        if encoded.len() as u64 >= self.identity.len {
            return None;
        }
        let etag = format!("{}-{}\"", self.etag.strip_suffix('"').unwrap_or(&self.etag), coding.token());
        let mut whole_fields = h1::FieldLines::default();
        whole_fields
            .header("Content-Type", &self.content_type)
            .header("Content-Encoding", coding.token())
            .header_u64("Content-Length", encoded.len() as u64)
            .header("Last-Modified", &self.last_modified)
            .header("ETag", &etag)
            .header("Accept-Ranges", "bytes")
            .header("Vary", "Accept-Encoding");
        Some(Variant { coding, bytes: encoded.into(), etag, whole_fields })
    }
}

/// The file cache (Apache 2.0's mod_file_cache idea from paper 003): small
/// files in memory, larger ones as open descriptors. The budget counts
/// file sizes either way, which also bounds the descriptors held
/// (budget ÷ `inline_max` at most).
///
/// Hits take only a read lock and stamp the entry with a logical clock, so
/// threads do not serialise on the hot path. When an insert pushes the
/// total over the byte budget, the least recently used entries are evicted
/// down to 90% of it, which amortises the sort over many inserts.
#[derive(Debug)]
pub struct Cache {
    entries: RwLock<Entries>,
    /// Twice the inserts so far: the age scale of `Entry::last_used`.
    clock: AtomicU64,
    budget: u64,
    max_file: u64,
    /// Files up to this size are held as bytes ([`Settings::inline_max`](crate::Settings::inline_max)).
    inline_max: u64,
    /// Budget bytes, bytes in memory and open descriptors of the entries
    /// held ([`Entry::held`]), each kept under the entries' write lock.
    held: [AtomicU64; 3],
    hits: AtomicU64,
    misses: AtomicU64,
    /// Misses being read now, for `--schedule srpt-group`'s coalescing.
    pub(crate) flights: crate::flights::Flights<Arc<Entry>>,
    /// Set by an event loop that reads its changes ([`Cache::watch`]).
    watch: OnceLock<Watch>,
    /// Held while changes are read and their entries dropped, and
    /// `changing` set meanwhile: a loop whose turn did not see the changes
    /// because another loop's read took them waits for that loop to finish
    /// dropping the stale entries ([`Cache::settle`]).
    change: Mutex<()>,
    changing: AtomicBool,
}

/// The entries by path. foldhash, not SipHash: hashing the path was 187
/// of the ~8,800 instructions of a cached 500 B request under SipHash, and
/// the keys are the docroot's own files, inserted only once they were
/// opened, so a client cannot fill the map with colliding keys. foldhash's
/// seed is still random per process.
type Entries = HashMap<String, Arc<Entry>, foldhash::fast::RandomState>;

/// A cache hit, and whether it still has to be checked against the disk.
pub(crate) enum Hit {
    /// The watch vouches for it.
    Fresh(Arc<Entry>),
    /// Compare its identity with a `stat` of the path first.
    Check(Arc<Entry>),
}

impl Cache {
    /// A cache holding at most `budget` bytes, none of its files larger than `max_file`.
    pub fn new(budget: u64, max_file: u64) -> Cache {
        Cache {
            entries: RwLock::new(Entries::default()),
            clock: AtomicU64::new(0),
            budget,
            max_file: max_file.min(budget),
            inline_max: INLINE_MAX_SENDFILE,
            held: Default::default(),
            hits: AtomicU64::new(0),
            misses: AtomicU64::new(0),
            flights: crate::flights::Flights::default(),
            watch: OnceLock::new(),
            change: Mutex::new(()),
            changing: AtomicBool::new(false),
        }
    }

    /// Watches the directories of the files this cache holds from the root
    /// `root_fd` for changes, so hits need no `stat`, and returns the
    /// descriptor to poll: when it is readable, call [`Cache::files_changed`]
    /// before serving anything else. Every caller gets the one watch.
    pub(crate) fn watch(
        &self,
        root_fd: BorrowedFd<'_>,
        error_log: &Arc<ErrorLog>,
    ) -> io::Result<BorrowedFd<'_>> {
        if self.watch.get().is_none() {
            // Two loops starting at once may both make one; one is kept.
            let _ = self.watch.set(Watch::new(root_fd, error_log.clone())?);
        }
        Ok(self.watch.get().map(Watch::fd).expect("set above"))
    }

    /// Reads the watch's changes and drops what they made stale.
    pub fn files_changed(&self) {
        let Some(watch) = self.watch.get() else { return };
        let _one_at_a_time = self.change.lock().unwrap_or_else(|e| e.into_inner());
        // Set before the read that empties the inotify queue: a loop whose
        // wait then found it empty sees the flag (the queue's lock orders
        // the two) and waits in `settle` until the entries are gone.
        self.changing.store(true, Ordering::SeqCst);
        self.drop_stale(watch.drain());
        self.changing.store(false, Ordering::SeqCst);
    }

    /// At the start of a loop's turn that did not see the watch readable:
    /// waits if another loop is dropping stale entries right now (one
    /// atomic load otherwise).
    pub fn settle(&self) {
        if self.changing.load(Ordering::SeqCst) {
            drop(self.change.lock().unwrap_or_else(|e| e.into_inner()));
        }
    }

    fn drop_stale(&self, stale: Vec<Stale>) {
        if stale.is_empty() {
            return;
        }
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        for change in stale {
            match change {
                Stale::Everything => {
                    for (_, old) in entries.drain() {
                        self.release(&old);
                    }
                }
                Stale::Path { key, beneath } => {
                    if let Some(old) = entries.remove(&key) {
                        self.release(&old);
                    }
                    if beneath {
                        let under = format!("{key}/");
                        entries.retain(|k, e| {
                            let keep = !k.starts_with(&under);
                            if !keep {
                                self.release(e);
                            }
                            keep
                        });
                    }
                }
            }
        }
    }

    /// Counts an entry's [`Entry::held`] as held (under the entries' write
    /// lock); returns the budget bytes now held.
    fn hold(&self, [bytes, memory, files]: [u64; 3]) -> u64 {
        self.held[1].fetch_add(memory, Ordering::Relaxed);
        self.held[2].fetch_add(files, Ordering::Relaxed);
        self.held[0].fetch_add(bytes, Ordering::Relaxed) + bytes
    }

    /// Counts `entry` as no longer held (under the entries' write lock).
    fn release(&self, entry: &Entry) {
        for (counter, n) in self.held.iter().zip(entry.held()) {
            counter.fetch_sub(n, Ordering::Relaxed);
        }
    }

    /// Before a file is read for the cache: watches its directories (when
    /// the cache is watched), so that no change after this goes unseen.
    pub(crate) fn ticket(&self, path: &str) -> Option<Ticket> {
        self.watch.get().map(|w| w.ticket(path))
    }

    /// Says once why a file is left to the `stat` (see `watch.rs`).
    pub(crate) fn unwatchable(&self, cause: &'static str, path: &str) {
        if let Some(w) = self.watch.get() {
            w.unwatchable(cause, path);
        }
    }

    /// Files up to `inline_max` bytes are held as bytes, larger ones as
    /// open descriptors (by default up to [`INLINE_MAX_SENDFILE`]).
    pub fn holding_bytes_up_to(mut self, inline_max: u64) -> Cache {
        self.inline_max = inline_max;
        self
    }

    /// Whether a file of `len` bytes is held as bytes rather than as a descriptor.
    pub(crate) fn holds_bytes(&self, len: u64) -> bool {
        len <= self.inline_max
    }

    /// Whether a file of `len` bytes may be cached.
    pub fn admits(&self, len: u64) -> bool {
        len <= self.max_file
    }

    /// The entry for `key`, and whether it must be checked against the disk
    /// (then [`Cache::hit`] once it matched).
    pub(crate) fn lookup(&self, key: &str) -> Option<Hit> {
        let entry = {
            let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
            entries.get(key).cloned()
        }?;
        if entry.watched.load(Ordering::Relaxed) {
            self.hit(&entry);
            Some(Hit::Fresh(entry))
        } else {
            Some(Hit::Check(entry))
        }
    }

    /// The entry for `key` if it still matches the file's `identity`.
    #[cfg(test)]
    pub(crate) fn get(&self, key: &str, identity: &Identity) -> Option<Arc<Entry>> {
        match self.lookup(key)? {
            Hit::Fresh(entry) => Some(entry),
            Hit::Check(entry) if entry.identity == *identity => {
                self.hit(&entry);
                Some(entry)
            }
            Hit::Check(_) => None,
        }
    }

    /// Counts a hit on `entry` and stamps it recently used.
    pub(crate) fn hit(&self, entry: &Entry) {
        // Stamped with the insert count, not a clock of its own: a hit on a
        // hot entry, whose stamp is current already, writes no shared line
        // but the hit counter, and eviction, which only an insert starts,
        // still finds what no hit touched since the most inserts ago.
        let now = self.clock.load(Ordering::Relaxed);
        if entry.last_used.load(Ordering::Relaxed) != now {
            entry.last_used.store(now, Ordering::Relaxed);
        }
        self.hits.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a cacheable file that had to be read from disk.
    pub(crate) fn note_miss(&self) {
        self.misses.fetch_add(1, Ordering::Relaxed);
    }

    /// Stores (or replaces) the entry for `key`; `ticket` is the watch's
    /// word for it, taken before the file was opened (none: `stat` per hit).
    pub(crate) fn insert(&self, key: &str, entry: Arc<Entry>, ticket: Option<Ticket>) {
        let len = entry.identity.len;
        if !self.admits(len) {
            return;
        }
        // The clock moves by two: the new entry is newer than every hit
        // before it (so its own insert never evicts it) and older than every
        // hit after it.
        entry.last_used.store(self.clock.fetch_add(2, Ordering::Relaxed) + 1, Ordering::Relaxed);
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        // Under the lock that `files_changed` takes after moving the epoch:
        // a change read since the ticket leaves this entry to the `stat`, and
        // one read later removes it.
        if let (Some(ticket), Some(watch)) = (ticket, self.watch.get()) {
            entry.watched.store(ticket.watched && ticket.epoch == watch.epoch(), Ordering::Relaxed);
        }
        let held = entry.held();
        if let Some(old) = entries.insert(key.to_owned(), entry) {
            self.release(&old);
        }
        if self.hold(held) > self.budget {
            self.evict(&mut entries, self.budget / 10 * 9);
        }
    }

    /// Adds a new variant's `len` bytes to `entry`, and to the budget if
    /// the entry is still the one cached under `key` (an evicted or
    /// replaced one, or an embedded file, is nobody's to count). Under the
    /// write lock, so an eviction subtracts exactly what was added.
    fn charge(&self, key: &str, entry: &Arc<Entry>, len: u64) {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        entry.variant_bytes.fetch_add(len, Ordering::Relaxed);
        if !entries.get(key).is_some_and(|cached| Arc::ptr_eq(cached, entry)) {
            return;
        }
        // Just used: the variant's own eviction must not take it.
        entry.last_used.store(self.clock.fetch_add(2, Ordering::Relaxed) + 1, Ordering::Relaxed);
        if self.hold([len, len, 0]) > self.budget {
            self.evict(&mut entries, self.budget / 10 * 9);
        }
    }

    fn evict(&self, entries: &mut Entries, target: u64) {
        let mut by_age: Vec<(u64, String)> =
            entries.iter().map(|(k, e)| (e.last_used.load(Ordering::Relaxed), k.clone())).collect();
        by_age.sort_unstable();
        for (_, key) in by_age {
            if self.held[0].load(Ordering::Relaxed) <= target {
                break;
            }
            if let Some(old) = entries.remove(&key) {
                self.release(&old);
            }
        }
    }

    /// Hits and misses since start, and what is held now.
    pub fn stats(&self) -> CacheSnap {
        let [bytes, memory, open_files] = self.held.each_ref().map(|n| n.load(Ordering::Relaxed));
        CacheSnap {
            hits: self.hits.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            bytes,
            memory,
            open_files,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(ino: u64, len: usize) -> Arc<Entry> {
        let id = Identity { dev: 1, ino, len: len as u64, modified: SystemTime::UNIX_EPOCH, changed: (0, 0) };
        Arc::new(Entry::new(id, Body::Bytes(vec![0u8; len].into()), String::new(), String::new()))
    }

    #[test]
    fn a_changed_identity_misses() {
        let cache = Cache::new(1000, 100);
        let e = entry(1, 10);
        let id = e.identity;
        cache.insert("/a", e, None);
        assert!(cache.get("/a", &id).is_some());
        let changed = Identity { len: 11, ..id };
        assert!(cache.get("/a", &changed).is_none());
        assert_eq!(cache.stats().hits, 1);
    }

    #[test]
    fn stays_within_budget_and_evicts_least_recently_used() {
        let cache = Cache::new(100, 40);
        let a = entry(1, 40);
        let ida = a.identity;
        cache.insert("/a", a, None);
        cache.insert("/b", entry(2, 40), None);
        assert!(cache.get("/a", &ida).is_some()); // /b is now the oldest
        cache.insert("/c", entry(3, 40), None);
        assert!(cache.stats().bytes <= 100);
        let entries = cache.entries.read().unwrap();
        assert!(entries.contains_key("/a") && entries.contains_key("/c") && !entries.contains_key("/b"));
    }

    /// An entry hit since the last insert and a new one share no stamp:
    /// the insert evicts the hit one, never itself (a tie would be broken
    /// by the path's spelling).
    #[test]
    fn an_insert_never_evicts_itself() {
        let cache = Cache::new(100, 70);
        let z = entry(1, 40);
        let idz = z.identity;
        cache.insert("/z", z, None);
        assert!(cache.get("/z", &idz).is_some());
        cache.insert("/a", entry(2, 70), None);
        let entries = cache.entries.read().unwrap();
        assert!(entries.contains_key("/a") && !entries.contains_key("/z"));
    }

    /// A variant is made once, counted with its file while the file is
    /// cached (and given back when it is evicted), never for a file the
    /// cache no longer holds.
    #[test]
    fn variants_count_in_the_budget() {
        let text: Vec<u8> = b"compressible text, ".repeat(50);
        let id = Identity {
            dev: 1,
            ino: 7,
            len: text.len() as u64,
            modified: SystemTime::UNIX_EPOCH,
            changed: (0, 0),
        };
        let a =
            Arc::new(Entry::new(id, Body::Bytes(text.clone().into()), "\"t\"".into(), "text/plain".into()));
        let cache = Cache::new(10_000, 5_000);
        cache.insert("/a", a.clone(), None);
        let made = a.variant(Coding::Gzip, &cache, "/a").expect("smaller once encoded");
        assert_eq!(made.etag, "\"t-gzip\"");
        let encoded = made.bytes.len() as u64;
        assert_eq!(cache.stats().bytes, text.len() as u64 + encoded);
        let again = a.variant(Coding::Gzip, &cache, "/a").unwrap();
        assert!(Arc::ptr_eq(&again.bytes, &made.bytes), "made once");
        assert_eq!(cache.stats().bytes, text.len() as u64 + encoded, "counted once");
        // Not cached under that key: made, not counted.
        let b =
            Arc::new(Entry::new(id, Body::Bytes(text.clone().into()), "\"t\"".into(), "text/plain".into()));
        b.variant(Coding::Br, &cache, "/b").unwrap();
        assert_eq!(cache.stats().bytes, text.len() as u64 + encoded);
        // Evicted with its variants: the budget holds only what is cached.
        cache.insert("/big", entry(2, 4_900), None);
        cache.insert("/big2", entry(3, 4_900), None);
        let held: u64 = cache.entries.read().unwrap().values().map(|e| e.size()).sum();
        assert_eq!(cache.stats().bytes, held);
    }

    /// What the status page shows of the cache: bytes in memory and open
    /// descriptors, apart, through inserts, replacements, variants,
    /// evictions and changes on disk.
    #[test]
    fn memory_and_open_files_are_counted_apart() {
        let file = |ino: u64, len: u64| {
            let id = Identity { dev: 1, ino, len, modified: SystemTime::UNIX_EPOCH, changed: (0, 0) };
            let fd = std::fs::File::open("/dev/null").expect("/dev/null");
            Arc::new(Entry::new(id, Body::File(Arc::new(fd)), String::new(), String::new()))
        };
        let held = |c: &Cache| {
            let s = c.stats();
            (s.bytes, s.memory, s.open_files)
        };
        let cache = Cache::new(100_000, 50_000);
        cache.insert("/small", entry(1, 1_000), None);
        cache.insert("/large", file(2, 40_000), None);
        assert_eq!(held(&cache), (41_000, 1_000, 1));
        cache.insert("/large", file(3, 30_000), None);
        assert_eq!(held(&cache), (31_000, 1_000, 1), "a replaced entry is given back");
        let text: Vec<u8> = b"compressible text, ".repeat(50);
        let id = Identity {
            dev: 1,
            ino: 4,
            len: text.len() as u64,
            modified: SystemTime::UNIX_EPOCH,
            changed: (0, 0),
        };
        let t = Arc::new(Entry::new(id, Body::Bytes(text.clone().into()), String::new(), String::new()));
        cache.insert("/t", t.clone(), None);
        let encoded = t.variant(Coding::Gzip, &cache, "/t").expect("smaller").bytes.len() as u64;
        let text_len = text.len() as u64;
        assert_eq!(held(&cache), (31_000 + text_len + encoded, 1_000 + text_len + encoded, 1));
        // Two more large files go over the budget: the oldest go.
        cache.insert("/large2", file(5, 45_000), None);
        cache.insert("/large3", file(6, 45_000), None);
        let entries: Vec<Arc<Entry>> = cache.entries.read().unwrap().values().cloned().collect();
        let sum = |f: fn(&Entry) -> u64| entries.iter().map(|e| f(e)).sum::<u64>();
        let expected = (sum(|e| e.held()[0]), sum(|e| e.held()[1]), sum(|e| e.held()[2]));
        assert_eq!(held(&cache), expected);
        assert!(expected.2 < 3 && expected.0 <= 100_000, "{expected:?}");
        cache.drop_stale(vec![Stale::Everything]);
        assert_eq!(held(&cache), (0, 0, 0));
    }

    #[test]
    fn refuses_files_over_the_limit() {
        let cache = Cache::new(1000, 10);
        cache.insert("/big", entry(1, 11), None);
        assert_eq!(cache.stats().bytes, 0);
    }
}
