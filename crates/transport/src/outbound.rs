use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, IoSlice, Write};
use std::net::TcpStream;
use std::ops::Range;
use std::sync::Arc;

use rustix::net::SendFlags;

/// The residency probe's granularity in [`FilePages`]: the
/// kernel reads ahead at least this much around a faulted page, so one probe
/// per block sees a block as cached or not.
pub const WARM_BLOCK: u64 = 128 << 10;

/// Bytes held in memory, without copying them per response.
#[derive(Clone, Debug)]
pub enum Data {
    /// Compiled into the binary (the demo site, fixed pages).
    Static(&'static [u8]),
    /// Shared with a cache entry; the range selects what to send.
    Shared(Arc<[u8]>, Range<usize>),
    /// Made for this response only (heads, error pages, listings).
    Owned(Vec<u8>),
}

impl Data {
    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Data::Static(b) => b,
            Data::Shared(b, r) => &b[r.clone()],
            Data::Owned(v) => v,
        }
    }
}

/// Reads `len` bytes of `file` at `at` (into the page cache; the copy in
/// `scratch` is thrown away) and returns how many there were.
fn read_block(file: &File, scratch: &mut Vec<u8>, at: u64, len: u64) -> io::Result<u64> {
    scratch.resize(len as usize, 0);
    let mut done = 0;
    while done < scratch.len() {
        match rustix::io::pread(file, &mut scratch[done..], at + done as u64) {
            Ok(0) => break,
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(done as u64)
}

/// What a residency probe found out about a block.
#[derive(Debug, PartialEq, Eq)]
enum Residency {
    Cached,
    Cold,
    /// The file system cannot answer without blocking (`RWF_NOWAIT`
    /// unsupported: older tmpfs, NFS, FUSE).
    Unknown,
}

/// Whether the block of `file` at `at` is in the page cache: a one-byte
/// `RWF_NOWAIT` read, which fails instead of waiting for the disk.
fn probe(file: &File, at: u64) -> Residency {
    let mut byte = [0u8; 1];
    let flags = rustix::io::ReadWriteFlags::NOWAIT;
    match rustix::io::preadv2(file, &mut [io::IoSliceMut::new(&mut byte)], at, flags) {
        Err(rustix::io::Errno::AGAIN) => Residency::Cold,
        Ok(_) | Err(rustix::io::Errno::INTR) => Residency::Cached,
        Err(_) => Residency::Unknown,
    }
}

/// File ranges a response is about to `sendfile` ([`Outbound::file_pages`]).
///
/// An event loop's `sendfile` blocks the whole loop while it waits for a
/// page that is not in memory; Flash's helpers touched the pages first so
/// the loop's send never waits for the disk. The loop asks [`cached`]
/// (cheap: a probe per [`WARM_BLOCK`]), and only when a block is cold does
/// a helper thread [`warm`] them.
///
/// [`cached`]: FilePages::cached
/// [`warm`]: FilePages::warm
#[derive(Debug, Default)]
pub struct FilePages {
    /// (file, offset, length)
    spans: Vec<(Arc<File>, u64, u64)>,
}

impl FilePages {
    /// True when no file bytes are among them.
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Whether every block is in the page cache, as far as a non-blocking
    /// probe per [`WARM_BLOCK`] can tell (never waits; `false` if it cannot tell).
    pub fn cached(&self) -> bool {
        self.spans.iter().all(|(file, offset, len)| {
            let mut at = *offset;
            while at < offset + len {
                if probe(file, at) != Residency::Cached {
                    return false;
                }
                at += WARM_BLOCK;
            }
            true
        })
    }

    /// Turns the kernel's read-ahead off for their files (`POSIX_FADV_RANDOM`,
    /// which holds for the open file, so for every later send of it): a
    /// cold read then reads what was asked and no more, so what a helper
    /// [`warm`](Self::warm)s is all that is read — and a `sendfile` over a
    /// read-ahead mark starts no read of its own.
    pub fn without_readahead(&self) {
        for (file, _, _) in &self.spans {
            let _ = rustix::fs::fadvise(&**file, 0, None, rustix::fs::Advice::Random);
        }
    }

    /// Brings them into the page cache and returns how many bytes had to be
    /// read from the disk. Residency is probed per [`WARM_BLOCK`], so a hot
    /// file costs a few cheap calls; a cold block is read whole, which
    /// blocks the calling (helper) thread.
    pub fn warm(&self) -> io::Result<u64> {
        let mut read_from_disk = 0;
        let mut scratch = Vec::new();
        for (file, offset, len) in &self.spans {
            let end = offset + len;
            let mut at = *offset;
            while at < end {
                let block = (end - at).min(WARM_BLOCK);
                match probe(file, at) {
                    Residency::Cold => read_from_disk += read_block(file, &mut scratch, at, block)?,
                    Residency::Cached => {}
                    // Ask for asynchronous read-ahead of the rest rather
                    // than read every block, hot or cold, on every reply.
                    Residency::Unknown => {
                        let rest = std::num::NonZeroU64::new(end - at);
                        let _ = rustix::fs::fadvise(&**file, at, rest, rustix::fs::Advice::WillNeed);
                        break;
                    }
                }
                at += block;
            }
        }
        Ok(read_from_disk)
    }
}

/// One piece of a response body.
#[derive(Debug)]
pub enum Chunk {
    /// Bytes in memory.
    Bytes(Data),
    /// `len` bytes of `file` from `offset`, sent with `sendfile` (zero copy).
    File {
        /// The open file; shared so multipart responses can name it several times.
        file: Arc<File>,
        /// Where the range starts.
        offset: u64,
        /// How many bytes to send.
        len: u64,
    },
}

impl Chunk {
    fn len(&self) -> u64 {
        match self {
            Chunk::Bytes(d) => d.as_slice().len() as u64,
            Chunk::File { len, .. } => *len,
        }
    }
}

/// What a write attempt achieved.
#[derive(Debug, PartialEq, Eq)]
pub enum Progress {
    /// Everything queued has been handed to the kernel.
    Done,
    /// The socket cannot take more now (non-blocking `EAGAIN`, or a blocking
    /// socket's send timeout expired); call again when it is writable.
    Blocked,
    /// The bytes a bounded write was allowed ([`Outbound::write_to_at_most`])
    /// went out; more is queued, and the socket may take it.
    Paused,
}

/// Chunks gathered into one `writev`; more rarely pays off and the array stays on the stack.
const MAX_IOVECS: usize = 8;
/// The kernel caps one `sendfile` at 2 GiB minus a page (nginx's `NGX_SENDFILE_MAXSIZE`).
const MAX_SENDFILE: u64 = 0x7fff_f000;

/// A response on its way to the peer.
#[derive(Debug, Default)]
pub struct Outbound {
    chunks: VecDeque<Chunk>,
    /// Bytes of the front chunk already sent.
    front_sent: u64,
    sent: u64,
    /// The first sent chunk that was made for this response (the head,
    /// usually), kept for [`recycle`](Self::recycle).
    spent: Vec<u8>,
    /// The connection closes (or shuts down its side) right after this
    /// response ([`closing`](Self::closing)).
    closing: bool,
    /// TCP_CORK is on: a closing response with a file in it.
    corked: bool,
}

impl Outbound {
    /// An empty response.
    pub fn new() -> Outbound {
        Outbound::default()
    }

    /// Appends a chunk (empty ones are dropped).
    pub fn push(&mut self, chunk: Chunk) {
        if chunk.len() > 0 {
            self.chunks.push_back(chunk);
        }
    }

    /// Bytes written so far (for the access log, which must count what was really sent).
    pub fn bytes_sent(&self) -> u64 {
        self.sent
    }

    /// Empties the response, keeping its queue's allocation for the next
    /// one, and returns the buffer of the first chunk made for it
    /// ([`Data::Owned`]) that was sent, cleared (empty and unallocated if
    /// there was none): a sent head's buffer, to write the next head into.
    pub fn recycle(&mut self) -> Vec<u8> {
        self.chunks.clear();
        (self.front_sent, self.sent, self.closing, self.corked) = (0, 0, false, false);
        let mut spent = std::mem::take(&mut self.spent);
        spent.clear();
        spent
    }

    /// Says the connection is closed (or its sending side shut down) as
    /// soon as this response is out: the last bytes in memory then go with
    /// `MSG_MORE`, and the kernel holds them until the close, whose FIN
    /// leaves in the same segment — nginx's `tcp_nopush` does this with
    /// TCP_CORK. Without it the response and the FIN are two segments,
    /// and on a connection per request the client acknowledges the first
    /// on its own: three segments where one does (BENCHMARKS.md,
    /// "Performance round 3"). A file's last bytes go with `sendfile`,
    /// which takes no flags: a response with a file sets TCP_CORK before
    /// its first write instead (one `setsockopt`, as nginx's tcp_nopush
    /// spends; the close ends the cork). The caller must close right after
    /// [`Progress::Done`]: held bytes wait for it.
    pub fn closing(&mut self, closing: bool) {
        self.closing = closing;
    }

    /// Chunks the queue has room for without growing (a multipart reply
    /// grows it to hundreds).
    pub fn queue_capacity(&self) -> usize {
        self.chunks.capacity()
    }

    /// Bytes still to write.
    pub fn remaining(&self) -> u64 {
        self.chunks.iter().map(Chunk::len).sum::<u64>() - self.front_sent
    }

    /// True when nothing is left to write.
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Whether a file chunk is still to be sent.
    pub fn holds_file(&self) -> bool {
        self.chunks.iter().any(|c| matches!(c, Chunk::File { .. }))
    }

    /// The file pages among the next `len` bytes still to send (bytes in
    /// memory count towards `len` but have no pages): what a helper warms
    /// before an event loop `sendfile`s them ([`FilePages`]).
    pub fn file_pages(&self, len: u64) -> FilePages {
        let mut spans = Vec::new();
        let mut budget = len;
        let mut skip = self.front_sent;
        for chunk in &self.chunks {
            if budget == 0 {
                break;
            }
            let take = (chunk.len() - skip).min(budget);
            if let Chunk::File { file, offset, .. } = chunk {
                spans.push((file.clone(), offset + skip, take));
            }
            budget -= take;
            skip = 0;
        }
        FilePages { spans }
    }

    /// Writes as much as the socket takes. Errors other than `WouldBlock`,
    /// `TimedOut` and `Interrupted` are returned; the connection is then dead.
    pub fn write_to(&mut self, sock: &TcpStream) -> io::Result<Progress> {
        self.write::<false>(sock, u64::MAX)
    }

    /// [`write_to`](Self::write_to), stopping with [`Progress::Paused`]
    /// once `limit` bytes went out: so a scheduler can look at what is left
    /// (and reprioritise the socket) between quanta of a large response.
    pub fn write_to_at_most(&mut self, sock: &TcpStream, limit: u64) -> io::Result<Progress> {
        self.write::<true>(sock, limit)
    }

    /// The write loop, `BOUNDED` by `allowed` bytes or not: the unbounded
    /// one, every response's under FIFO, keeps no count.
    fn write<const BOUNDED: bool>(&mut self, sock: &TcpStream, mut allowed: u64) -> io::Result<Progress> {
        if self.closing && !self.corked && self.chunks.iter().any(|c| matches!(c, Chunk::File { .. })) {
            // Best effort: without the cork the FIN leaves on its own.
            self.corked = rustix::net::sockopt::set_tcp_cork(sock, true).is_ok();
        }
        loop {
            if BOUNDED && allowed == 0 {
                return Ok(if self.chunks.is_empty() { Progress::Done } else { Progress::Paused });
            }
            let result = match self.chunks.front() {
                None => return Ok(Progress::Done),
                Some(Chunk::Bytes(_)) => self.write_memory::<BOUNDED>(sock, allowed),
                Some(Chunk::File { .. }) => self.write_file(sock, allowed),
            };
            match result {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    if BOUNDED {
                        allowed -= n as u64;
                    }
                    self.advance(n as u64)
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut => {
                    return Ok(Progress::Blocked)
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// One `writev` over the leading in-memory chunks. When a file chunk
    /// follows, `MSG_MORE` keeps the kernel from pushing the head out in a
    /// segment of its own just before `sendfile` (nginx uses TCP_CORK for
    /// this; `MSG_MORE` costs no extra system calls).
    fn write_memory<const BOUNDED: bool>(&self, sock: &TcpStream, allowed: u64) -> io::Result<usize> {
        let mut slices = [IoSlice::new(&[]); MAX_IOVECS];
        let mut count = 0;
        let mut file_follows = false;
        let mut budget = usize::try_from(allowed).unwrap_or(usize::MAX);
        for chunk in &self.chunks {
            if BOUNDED && budget == 0 {
                break;
            }
            match chunk {
                Chunk::Bytes(data) if count < MAX_IOVECS => {
                    let bytes = &data.as_slice()[if count == 0 { self.front_sent as usize } else { 0 }..];
                    let bytes = if BOUNDED {
                        let take = bytes.len().min(budget);
                        budget -= take;
                        &bytes[..take]
                    } else {
                        bytes
                    };
                    slices[count] = IoSlice::new(bytes);
                    count += 1;
                }
                Chunk::Bytes(_) => break,
                Chunk::File { .. } => {
                    file_follows = true;
                    break;
                }
            }
        }
        // The response's last bytes, with the close to follow.
        let last = self.closing && !file_follows && count == self.chunks.len() && !(BOUNDED && budget == 0);
        match (file_follows || last, count) {
            (true, 1) => rustix::net::send(sock, &slices[0], SendFlags::MORE).map_err(io::Error::from),
            (true, _) => {
                rustix::net::sendmsg(sock, &slices[..count], &mut Default::default(), SendFlags::MORE)
                    .map_err(io::Error::from)
            }
            (false, _) => {
                let mut writer = sock;
                writer.write_vectored(&slices[..count])
            }
        }
    }

    fn write_file(&self, sock: &TcpStream, allowed: u64) -> io::Result<usize> {
        let Some(Chunk::File { file, offset, len }) = self.chunks.front() else {
            unreachable!("write_file is called for a file chunk");
        };
        let mut pos = offset + self.front_sent;
        let count = (len - self.front_sent).min(MAX_SENDFILE).min(allowed) as usize;
        rustix::fs::sendfile(sock, file.as_ref(), Some(&mut pos), count).map_err(io::Error::from)
    }

    /// Copies up to `limit` bytes of what is queued into `dst` (files read
    /// with `pread`) and counts them as sent: the write path of a wire that
    /// is not a socket (an in-memory one in tests, a TLS session's plaintext).
    /// Returns how many bytes were copied; 0 only when nothing is queued or
    /// a file shrank under the response.
    pub fn copy_into(&mut self, dst: &mut Vec<u8>, limit: usize) -> io::Result<usize> {
        let mut copied = 0;
        while copied < limit {
            let Some(front) = self.chunks.front() else { break };
            let want = (front.len() - self.front_sent).min((limit - copied) as u64) as usize;
            let n = match front {
                Chunk::Bytes(data) => {
                    let at = self.front_sent as usize;
                    dst.extend_from_slice(&data.as_slice()[at..at + want]);
                    want
                }
                Chunk::File { file, offset, .. } => {
                    let start = dst.len();
                    dst.resize(start + want, 0);
                    let n = rustix::io::pread(file.as_ref(), &mut dst[start..], offset + self.front_sent)?;
                    dst.truncate(start + n);
                    n
                }
            };
            if n == 0 {
                break;
            }
            self.advance(n as u64);
            copied += n;
        }
        Ok(copied)
    }

    /// The chunk at the front of the queue and the range of its bytes not
    /// sent yet: for a writer that hands the bytes to the kernel itself
    /// (the `uring` model's sends, which keep the chunk's memory alive until
    /// the kernel is done with it), then calls [`consume`](Self::consume).
    pub fn front(&self) -> Option<(&Chunk, Range<u64>)> {
        self.chunks.front().map(|chunk| (chunk, self.front_sent..chunk.len()))
    }

    /// Counts `n` more bytes from the front as sent (at most what is queued).
    pub fn consume(&mut self, n: u64) {
        self.advance(n.min(self.remaining()));
    }

    // Inlined into the write loop: a call here cost more than its body.
    #[inline(always)]
    fn advance(&mut self, mut n: u64) {
        self.sent += n;
        while n > 0 {
            let front = self.chunks.front().expect("the kernel never takes more than was offered");
            let left = front.len() - self.front_sent;
            if n < left {
                self.front_sent += n;
                return;
            }
            n -= left;
            self.front_sent = 0;
            if let Some(Chunk::Bytes(Data::Owned(bytes))) = self.chunks.pop_front() {
                if self.spent.capacity() == 0 {
                    self.spent = bytes;
                }
            }
        }
        // A file that shrank under sendfile reads as a 0-byte send; the
        // caller's WriteZero error then ends the connection rather than spin.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Read, Seek, SeekFrom};
    use std::net::TcpListener;
    use std::time::Instant;

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    #[test]
    fn warming_leaves_every_block_of_the_range_cached() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold.bin");
        let data: Vec<u8> = (0..(1u32 << 20) + 100).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &data).unwrap();
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        // Evict the clean pages where the file system allows it, so the warm-up has disk work.
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
        let probe_at = |file: &File, at: u64| {
            let mut b = [0u8; 1];
            rustix::io::preadv2(
                file,
                &mut [io::IoSliceMut::new(&mut b)],
                at,
                rustix::io::ReadWriteFlags::NOWAIT,
            )
        };
        // Whether the eviction worked here (it does on ext4; tmpfs keeps every page).
        let evicted = probe_at(&file, 1000) == Err(rustix::io::Errno::AGAIN);
        let file = Arc::new(file);
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Static(b"head")));
        out.push(Chunk::File { file: file.clone(), offset: 1000, len: data.len() as u64 - 1000 });
        assert!(!evicted || !out.file_pages(u64::MAX).cached(), "cold pages pass for cached");
        let read = out.file_pages(u64::MAX).warm().unwrap();
        assert!(out.file_pages(u64::MAX).cached());
        assert!(read <= data.len() as u64, "{read}");
        if evicted {
            assert!(read > 0, "cold pages were not read");
        }
        let mut at = 1000;
        while at < data.len() as u64 {
            let mut b = [0u8; 1];
            let n = rustix::io::preadv2(
                &*file,
                &mut [io::IoSliceMut::new(&mut b)],
                at,
                rustix::io::ReadWriteFlags::NOWAIT,
            );
            assert_eq!(n.ok(), Some(1), "block at {at} still not cached");
            assert_eq!(b[0], data[at as usize]);
            at += WARM_BLOCK;
        }
        // Warming changes nothing about what is sent.
        let (server, mut client) = pair();
        assert_eq!(out.write_to(&server).unwrap(), Progress::Done);
        drop(server);
        let mut got = Vec::new();
        client.read_to_end(&mut got).unwrap();
        assert_eq!(&got[..4], b"head");
        assert_eq!(&got[4..], &data[1000..]);
    }

    /// What the client can read before the server's FIN: nothing for a
    /// closing response, something otherwise (loopback delivers a pushed
    /// segment within the send itself). The kernel releases corked or
    /// `MSG_MORE` bytes after 200 ms whatever happens, so on a machine
    /// busy enough to leave this thread waiting that long the first half
    /// cannot be told and is not asserted. Leaves the client blocking.
    fn arrived_before_the_fin(client: &TcpStream, closing: bool, wrote: Instant) -> Vec<u8> {
        client.set_nonblocking(true).unwrap();
        let mut got = vec![0u8; 8192];
        let early = match (&*client).read(&mut got) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
            Ok(n) => n,
            Err(e) => panic!("{e}"),
        };
        got.truncate(early);
        if !closing || wrote.elapsed() < std::time::Duration::from_millis(150) {
            assert_eq!(early == 0, closing, "closing {closing}: {early} bytes arrived before the FIN");
        }
        client.set_nonblocking(false).unwrap();
        got
    }

    /// A closing response's tail waits in the kernel for the FIN, so the
    /// two leave together; an open connection's response leaves at once.
    #[test]
    fn a_closing_responses_last_bytes_wait_for_the_fin() {
        for (closing, chunks) in [(true, 1), (true, 3), (false, 3)] {
            let (server, mut client) = pair();
            let mut out = Outbound::new();
            out.push(Chunk::Bytes(Data::Owned(b"HTTP/1.1 200 OK\r\n\r\n".to_vec())));
            for i in 1..chunks {
                out.push(Chunk::Bytes(Data::Owned(vec![b'0' + i as u8; 700])));
            }
            out.closing(closing);
            let want: Vec<u8> = out
                .chunks
                .iter()
                .flat_map(|c| match c {
                    Chunk::Bytes(d) => d.as_slice().to_vec(),
                    Chunk::File { .. } => unreachable!(),
                })
                .collect();
            let wrote = Instant::now();
            assert_eq!(out.write_to(&server).unwrap(), Progress::Done);
            let mut got = arrived_before_the_fin(&client, closing, wrote);
            server.shutdown(std::net::Shutdown::Write).unwrap();
            client.read_to_end(&mut got).unwrap();
            assert_eq!(got, want, "closing {closing}, {chunks} chunk(s)");
            // The flag does not outlive the response.
            out.recycle();
            assert!(!out.closing);
        }
    }

    /// With a file in it, a closing response corks the socket: the file's
    /// tail, too, waits for the FIN.
    #[test]
    fn a_closing_response_with_a_file_waits_for_the_fin_too() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("body.bin");
        std::fs::write(&path, vec![b'f'; 3000]).unwrap();
        let file = Arc::new(File::open(&path).unwrap());
        for closing in [true, false] {
            let (server, mut client) = pair();
            let mut out = Outbound::new();
            out.push(Chunk::Bytes(Data::Static(b"head")));
            out.push(Chunk::File { file: file.clone(), offset: 0, len: 3000 });
            out.closing(closing);
            let wrote = Instant::now();
            assert_eq!(out.write_to(&server).unwrap(), Progress::Done);
            assert_eq!(rustix::net::sockopt::tcp_cork(&server).unwrap(), closing);
            let mut got = arrived_before_the_fin(&client, closing, wrote);
            server.shutdown(std::net::Shutdown::Write).unwrap();
            client.read_to_end(&mut got).unwrap();
            assert_eq!((&got[..4], got.len()), (&b"head"[..], 3004), "closing {closing}");
            assert!(got[4..].iter().all(|b| *b == b'f'));
        }
    }

    #[test]
    fn warming_stops_at_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cold.bin");
        std::fs::write(&path, vec![7u8; 2 << 20]).unwrap();
        let file = File::open(&path).unwrap();
        file.sync_all().unwrap();
        let _ = rustix::fs::fadvise(&file, 0, None, rustix::fs::Advice::DontNeed);
        let file = Arc::new(file);
        let mut out = Outbound::new();
        out.push(Chunk::File { file: file.clone(), offset: 0, len: 1 << 20 });
        out.push(Chunk::File { file, offset: 1 << 20, len: 1 << 20 });
        assert!(out.file_pages(0).is_empty(), "no budget, no pages");
        // The limit ends the walk inside the first range: at most one block is read.
        assert!(out.file_pages(64 << 10).warm().unwrap() <= WARM_BLOCK);
    }

    /// The pages of the next bytes to send: past what was sent, memory
    /// counted but not listed, across chunks, ending at the length asked.
    #[test]
    fn file_pages_follow_what_is_left_to_send() {
        let file = Arc::new(tempfile::tempfile().unwrap());
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Static(b"head")));
        out.push(Chunk::File { file: file.clone(), offset: 1000, len: 500 });
        out.push(Chunk::Bytes(Data::Static(b"--")));
        out.push(Chunk::File { file, offset: 0, len: 300 });
        let spans = |out: &Outbound, len| -> Vec<(u64, u64)> {
            out.file_pages(len).spans.iter().map(|(_, at, n)| (*at, *n)).collect()
        };
        assert_eq!(spans(&out, 3), []);
        assert_eq!(spans(&out, 104), [(1000, 100)]);
        assert_eq!(spans(&out, 10_000), [(1000, 500), (0, 300)]);
        out.consume(4 + 450);
        assert_eq!(spans(&out, 60), [(1450, 50), (0, 8)]);
        out.consume(50 + 2 + 100);
        assert_eq!(spans(&out, 1000), [(100, 200)]);
        out.consume(200);
        assert!(out.file_pages(1000).is_empty());
    }

    #[test]
    fn head_memory_and_file_ranges_arrive_in_order() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(b"0123456789abcdef").unwrap();
        f.seek(SeekFrom::Start(0)).unwrap();
        let file = Arc::new(f);
        let (server, mut client) = pair();
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Owned(b"HEAD|".to_vec())));
        out.push(Chunk::File { file: file.clone(), offset: 10, len: 6 });
        out.push(Chunk::Bytes(Data::Static(b"|mid|")));
        out.push(Chunk::Bytes(Data::Shared(Arc::from(&b"xxSHAREDxx"[..]), 2..8)));
        out.push(Chunk::File { file, offset: 0, len: 3 });
        out.push(Chunk::Bytes(Data::Static(b"")));
        assert_eq!(out.write_to(&server).unwrap(), Progress::Done);
        assert_eq!(out.bytes_sent(), 5 + 6 + 5 + 6 + 3);
        drop(server);
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert_eq!(got, "HEAD|abcdef|mid|SHARED012");
    }

    #[test]
    fn recycling_returns_the_first_owned_buffer_sent() {
        let (server, mut client) = pair();
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Static(b"<")));
        out.push(Chunk::Bytes(Data::Owned(Vec::with_capacity(300))));
        out.push(Chunk::Bytes(Data::Owned(b"head".to_vec())));
        out.push(Chunk::Bytes(Data::Owned(b"body".to_vec())));
        assert_eq!(out.write_to(&server).unwrap(), Progress::Done);
        let spent = out.recycle();
        assert_eq!(
            (spent.len(), spent.capacity()),
            (0, 4),
            "the head's buffer, emptied (empty chunks are never queued)"
        );
        assert!(out.is_empty());
        assert_eq!(out.bytes_sent(), 0);
        assert_eq!(out.recycle().capacity(), 0, "given once");

        // The recycled response is a new one.
        out.push(Chunk::Bytes(Data::Owned(b"next".to_vec())));
        assert_eq!(out.write_to(&server).unwrap(), Progress::Done);
        assert_eq!(out.bytes_sent(), 4);
        drop(server);
        let mut got = String::new();
        client.read_to_string(&mut got).unwrap();
        assert_eq!(got, "<headbodynext");
    }

    #[test]
    fn a_full_nonblocking_socket_reports_blocked_and_resumes() {
        let (server, mut client) = pair();
        server.set_nonblocking(true).unwrap();
        let big = vec![7u8; 8 << 20];
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Owned(big)));
        assert_eq!(out.write_to(&server).unwrap(), Progress::Blocked);
        assert!(out.bytes_sent() < 8 << 20);
        let reader = std::thread::spawn(move || {
            let mut n = 0usize;
            let mut buf = vec![0u8; 1 << 16];
            loop {
                match client.read(&mut buf).unwrap() {
                    0 => return n,
                    k => n += k,
                }
            }
        });
        while out.write_to(&server).unwrap() == Progress::Blocked {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        drop(server);
        assert_eq!(reader.join().unwrap(), 8 << 20);
    }
}
