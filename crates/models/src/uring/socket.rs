//! A client socket whose bytes move by io_uring completions, and the
//! driver that runs a connection over it ([`Link::drive`]).
//!
//! The loop runs the connection's [`Connection::step`] itself and performs
//! the [`Io`] it asks for against buffers of its own, in each direction:
//!
//! * **In**: a read copies the bytes the receive being handled brought
//!   straight from their ring buffer into the connection's read room. What
//!   does not fit, or arrives while the connection is not reading (writing,
//!   waiting for a helper), waits in `inbox`, and the next read takes it
//!   first; an empty inbox says `WouldBlock`, 0 after the peer's end. The
//!   loop pauses the receive when too much is waiting unread.
//! * **Out**: a send never blocks on the kernel: the bytes are queued
//!   (`outbox`) — cached and static bodies by reference (an `Arc` clone, no
//!   copy), heads and file pieces copied — and the loop turns the queue
//!   into one `sendmsg` after the drive (a [`Batch`], `send.rs`). Like a
//!   socket's send buffer, the queue takes at most [`SEND_WINDOW`] bytes
//!   (queued plus in flight), so a large file is read a piece at a time as
//!   the peer takes it, and a `Done` means what it means for a socket:
//!   handed to the kernel, not yet received. Where the loop sends files
//!   zero-copy (`uring/files.rs`), a file chunk is queued as a
//!   [`FilePiece`] instead of being read: the batch that takes it ends with
//!   it, and what was queued after it waits for the next batch. On the
//!   `sendfile` path a response that holds a file, with nothing of ours
//!   queued or in flight before it, is written at once by the socket's own
//!   calls as in `event`, and only what the kernel's buffer does not take
//!   is queued.
//!
//! A TLS session reads its records from the inbox and queues them through
//! the socket as its [`Carrier`]: it is driven by [`Connection::drive`],
//! with the received bytes put in the inbox first. A streamed responder's
//! body and output are the core's reads and sends like any other.
//!
//! The buffers are behind a `RefCell`: the `Carrier` methods take
//! `&self`, and a loop thread owns the socket.

use std::cell::RefCell;
use std::fs::File;
use std::io::{self, IoSlice};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Instant;

use pipeline::{Connection, Facts, Io, Pipeline, Want};
use transport::tls::{Carrier, TlsStream};
use transport::{Chunk, Data, Outbound, Progress, Wire};

use super::files::{FilePiece, FileSend};
use super::send::{give_back, spare, Batch};
use super::SEND_WINDOW;

/// A file chunk is read into memory this much at a time.
const FILE_PIECE: usize = 64 << 10;
/// An emptied inbox keeps its allocation up to this size.
const INBOX_KEEP: usize = 4 << 10;

#[derive(Default)]
struct Buffers {
    /// Received and not yet read: `inbox[read_at..]`.
    inbox: Vec<u8>,
    read_at: usize,
    /// The peer's end, once seen: 0 for its FIN, else the receive's errno.
    end: Option<i32>,
    /// Queued for the next send, in order.
    outbox: Vec<Data>,
    /// A file piece queued after the first `.1` pieces of `outbox`.
    file: Option<(FilePiece, usize)>,
    /// Whether the last piece of `outbox` is a copy that may grow.
    open_tail: bool,
    queued: usize,
    in_flight: usize,
    /// A send failed with this errno: the connection is dead.
    send_error: Option<i32>,
    /// Our side is to be shut once everything queued has gone.
    shut: bool,
}

impl Buffers {
    fn room(&self) -> usize {
        SEND_WINDOW.saturating_sub(self.queued + self.in_flight)
    }

    fn check_send(&self) -> io::Result<()> {
        match self.send_error {
            Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            None => Ok(()),
        }
    }

    /// A buffer to copy `want` bytes into, at the end of the queue.
    fn copy_target(&mut self, want: usize) -> &mut Vec<u8> {
        if !self.open_tail {
            self.outbox.push(Data::Owned(spare(want)));
            self.open_tail = true;
        }
        match self.outbox.last_mut() {
            Some(Data::Owned(buf)) => buf,
            _ => unreachable!("an open tail is an owned copy"),
        }
    }

    fn copy_in(&mut self, bytes: &[u8]) {
        self.copy_target(bytes.len()).extend_from_slice(bytes);
        self.queued += bytes.len();
    }

    /// Queues `len` bytes of `file` from `offset` to be sent from the
    /// file; `false` when another file piece is queued that this one does
    /// not continue (it waits for that one to go).
    fn queue_file(&mut self, file: &Arc<File>, offset: u64, len: usize) -> bool {
        match &mut self.file {
            Some((piece, at))
                if *at == self.outbox.len()
                    && Arc::ptr_eq(&piece.file, file)
                    && piece.offset + piece.len as u64 == offset =>
            {
                piece.len += len
            }
            Some(_) => return false,
            None => {
                let piece = FilePiece { file: file.clone(), offset, len };
                self.file = Some((piece, self.outbox.len()));
            }
        }
        // What is queued after it must not join a piece before it.
        self.open_tail = false;
        self.queued += len;
        true
    }

    fn share(&mut self, data: Data) {
        self.queued += data.as_slice().len();
        self.outbox.push(data);
        self.open_tail = false;
    }

    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let waiting = &self.inbox[self.read_at..];
        if waiting.is_empty() {
            return match self.end {
                None => Err(io::ErrorKind::WouldBlock.into()),
                Some(0) => Ok(0),
                Some(errno) => Err(io::Error::from_raw_os_error(errno)),
            };
        }
        let n = waiting.len().min(buf.len());
        buf[..n].copy_from_slice(&waiting[..n]);
        self.read_at += n;
        if self.read_at == self.inbox.len() {
            self.read_at = 0;
            if self.inbox.capacity() > INBOX_KEEP {
                self.inbox = Vec::new();
            } else {
                self.inbox.clear();
            }
        }
        Ok(n)
    }

    /// A read for the connection's [`Io::Read`]: the inbox first (bytes
    /// that found no room when they came), then `arrived`, the bytes of the
    /// receive being handled, copied straight from its ring buffer.
    fn read_arrived(&mut self, room: &mut [u8], arrived: &mut &[u8]) -> io::Result<usize> {
        if arrived.is_empty() || self.read_at < self.inbox.len() {
            return self.read(room);
        }
        let n = arrived.len().min(room.len());
        room[..n].copy_from_slice(&arrived[..n]);
        *arrived = &arrived[n..];
        Ok(n)
    }

    fn write(&mut self, bytes: &[u8]) -> io::Result<usize> {
        self.check_send()?;
        let n = bytes.len().min(self.room());
        if n == 0 && !bytes.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.copy_in(&bytes[..n]);
        Ok(n)
    }
}

/// An accepted socket driven by the ring. The descriptor itself is used
/// only for what has no ring operation the loop would batch: socket
/// options and the local address.
pub(super) struct RingSocket {
    sock: TcpStream,
    io: RefCell<Buffers>,
    /// File chunks are queued as file pieces, not read.
    file_pieces: bool,
    /// A response that holds a file, with nothing of ours queued or in
    /// flight before it, is written by the socket's own calls (the loop's
    /// `sendfile` path; the socket is then non-blocking).
    direct_files: bool,
}

impl RingSocket {
    pub(super) fn new(sock: TcpStream, file_pieces: bool, direct_files: bool) -> RingSocket {
        RingSocket { sock, io: RefCell::new(Buffers::default()), file_pieces, direct_files }
    }

    pub(super) fn fd(&self) -> RawFd {
        self.sock.as_raw_fd()
    }

    /// Whether the peer's bytes wait in the kernel, not yet taken by a
    /// receive (`FIONREAD`). Under `DEFER_TASKRUN` a receive takes them
    /// only while the loop is in `io_uring_enter`, so between two entries
    /// this is exact: what arrived is here or in a completion already seen.
    pub(super) fn unread_in_kernel(&self) -> bool {
        rustix::io::ioctl_fionread(&self.sock).is_ok_and(|n| n > 0)
    }

    /// The socket itself, for `sendfile`.
    pub(super) fn stream(&self) -> &TcpStream {
        &self.sock
    }

    /// Gives up the descriptor, for the loop to close it with a ring operation.
    pub(super) fn into_fd(self) -> RawFd {
        std::os::fd::IntoRawFd::into_raw_fd(self.sock)
    }

    /// Ends our direction now (the FIN follows what was sent).
    pub(super) fn shutdown_now(&self) {
        let _ = self.sock.shutdown(std::net::Shutdown::Write);
    }

    /// Bytes the ring received.
    pub(super) fn arrived(&self, bytes: &[u8]) {
        self.io.borrow_mut().inbox.extend_from_slice(bytes);
    }

    /// The receiving ended: 0 for the peer's FIN, else the errno.
    pub(super) fn ended(&self, errno: i32) {
        self.io.borrow_mut().end.get_or_insert(errno);
    }

    /// Whether the peer's end (or a receive error) has been seen.
    pub(super) fn has_ended(&self) -> bool {
        self.io.borrow().end.is_some()
    }

    /// Bytes received and not yet read.
    pub(super) fn unread(&self) -> usize {
        let io = self.io.borrow();
        io.inbox.len() - io.read_at
    }

    /// The queued bytes as one send, counted in flight from now on: all
    /// of them, or those up to and including a queued file piece.
    pub(super) fn take_batch(&self) -> Option<Box<Batch>> {
        let mut io = self.io.borrow_mut();
        let Some((piece, at)) = io.file.take() else {
            if io.outbox.is_empty() {
                return None;
            }
            io.open_tail = false;
            io.in_flight += io.queued;
            io.queued = 0;
            return Some(Batch::new(&mut io.outbox));
        };
        let mut before: Vec<Data> = io.outbox.drain(..at).collect();
        let taken = before.iter().map(|d| d.as_slice().len()).sum::<usize>() + piece.len;
        io.in_flight += taken;
        io.queued -= taken;
        let mut batch = Batch::new(&mut before);
        batch.file = Some(FileSend::new(piece));
        Some(batch)
    }

    /// Whether a send failed (nothing more will go).
    pub(super) fn failed(&self) -> bool {
        self.io.borrow().send_error.is_some()
    }

    /// The kernel took `n` bytes of the send in flight.
    pub(super) fn sent(&self, n: usize) {
        let mut io = self.io.borrow_mut();
        io.in_flight -= n.min(io.in_flight);
    }

    /// A send failed: every later write fails with `errno`, and nothing
    /// queued will go.
    pub(super) fn send_failed(&self, errno: i32) {
        let mut io = self.io.borrow_mut();
        io.send_error.get_or_insert(errno);
        io.in_flight = 0;
        io.queued = 0;
        io.open_tail = false;
        io.file = None;
        for piece in io.outbox.drain(..) {
            if let Data::Owned(buf) = piece {
                give_back(buf);
            }
        }
    }

    /// Whether our side should be shut now: asked for, and nothing is left
    /// to send before the FIN (asked once).
    pub(super) fn take_shutdown(&self) -> bool {
        let mut io = self.io.borrow_mut();
        let now = io.shut && io.queued == 0 && io.in_flight == 0;
        if now {
            io.shut = false;
        }
        now
    }

    fn queue_response(&self, out: &mut Outbound, limit: u64) -> io::Result<Progress> {
        let mut io = self.io.borrow_mut();
        io.check_send()?;
        let mut allowed = limit;
        if self.direct_files && io.queued == 0 && io.in_flight == 0 && out.holds_file() {
            // Written at once as `event` writes it (the head with `MSG_MORE`,
            // then one `sendfile`): in window-sized pieces the server took
            // the client's ACKs between its calls and woke it 3–5 times a
            // 1 MB response, at 20–40 % more CPU (BENCHMARKS.md, "uring at
            // 1 MB"). What the kernel's buffer does not take is queued
            // below, and the loop sends it when the socket has room; the
            // connection counts as sent only what the kernel took, so slow
            // readers meet the send timeout and the minimum rate as before.
            let before = out.bytes_sent();
            match out.write_to_at_most(&self.sock, allowed)? {
                Progress::Blocked => allowed -= out.bytes_sent() - before,
                done_or_paused => return Ok(done_or_paused),
            }
        }
        loop {
            let Some((chunk, unsent)) = out.front() else { return Ok(Progress::Done) };
            let sent = unsent.start;
            if allowed == 0 {
                return Ok(Progress::Paused);
            }
            let room = io.room() as u64;
            if room == 0 {
                return Ok(Progress::Blocked);
            }
            let take = (unsent.end - sent).min(allowed);
            let n = match chunk {
                // Made for this response (a head, an error page): copied,
                // so the connection gets the buffer back for the next one.
                Chunk::Bytes(Data::Owned(bytes)) => {
                    let n = take.min(room) as usize;
                    io.copy_in(&bytes[sent as usize..][..n]);
                    n as u64
                }
                // Static or cached: sent from where it is.
                Chunk::Bytes(data) => {
                    let (from, to) = (sent as usize, (sent + take) as usize);
                    io.share(match data {
                        Data::Static(bytes) => Data::Static(&bytes[from..to]),
                        Data::Shared(bytes, range) => {
                            Data::Shared(bytes.clone(), range.start + from..range.start + to)
                        }
                        Data::Owned(_) => unreachable!("matched above"),
                    });
                    take
                }
                Chunk::File { file, offset, .. } if self.file_pieces => {
                    let mut n = take.min(room);
                    // A piece cut by the window ends at a page boundary, so
                    // the next one starts at one and fills a pipe whole (a
                    // pipe holds a page per slot).
                    let (start, page) = (offset + sent, rustix::param::page_size() as u64);
                    if n < take {
                        let end = (start + n) / page * page;
                        if end <= start {
                            return Ok(Progress::Blocked);
                        }
                        n = end - start;
                    }
                    let n = n as usize;
                    if !io.queue_file(file, offset + sent, n) {
                        return Ok(Progress::Blocked);
                    }
                    n as u64
                }
                Chunk::File { file, offset, .. } => {
                    let n = take.min(room).min(FILE_PIECE as u64) as usize;
                    let buf = io.copy_target(n);
                    let start = buf.len();
                    buf.resize(start + n, 0);
                    let read = rustix::io::pread(&**file, &mut buf[start..], offset + sent);
                    let got = *read.as_ref().unwrap_or(&0);
                    buf.truncate(start + got);
                    io.queued += got;
                    match read {
                        Err(e) => return Err(e.into()),
                        Ok(0) => {
                            return Err(io::Error::new(
                                io::ErrorKind::UnexpectedEof,
                                "a file shrank while it was sent",
                            ))
                        }
                        Ok(got) => got as u64,
                    }
                }
            };
            out.consume(n);
            allowed -= n;
        }
    }
}

impl Facts for RingSocket {
    fn holds_more(&self) -> bool {
        false
    }

    fn handshaking(&self) -> bool {
        false
    }

    fn handshake_ended(&self) -> Option<Instant> {
        None
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()
    }
}

impl Carrier for RingSocket {
    fn recv(&self, buf: &mut [u8], _wait: bool) -> io::Result<usize> {
        self.io.borrow_mut().read(buf)
    }

    fn peek(&self, buf: &mut [u8], _wait: bool) -> io::Result<usize> {
        let io = self.io.borrow();
        let waiting = &io.inbox[io.read_at..];
        if waiting.is_empty() {
            return match io.end {
                None => Err(io::ErrorKind::WouldBlock.into()),
                Some(_) => Ok(0),
            };
        }
        let n = waiting.len().min(buf.len());
        buf[..n].copy_from_slice(&waiting[..n]);
        Ok(n)
    }

    fn send(&self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let mut io = self.io.borrow_mut();
        let mut total = 0;
        for buf in bufs {
            match io.write(buf) {
                Ok(n) => {
                    total += n;
                    if n < buf.len() {
                        break;
                    }
                }
                Err(e) if total > 0 && transport::not_now(&e) => break,
                Err(e) => return Err(e),
            }
        }
        Ok(total)
    }

    fn shutdown_write(&self) {
        self.io.borrow_mut().shut = true;
    }

    fn set_priority(&self, priority: u32) -> io::Result<()> {
        Wire::set_priority(&self.sock, priority)
    }

    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()> {
        Wire::set_unsent_limit(&self.sock, bytes)
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        self.sock.local_addr().ok()
    }
}

/// A connection's wire: the ring socket, or a TLS session over it.
pub(super) enum Link {
    Plain(RingSocket),
    Tls(Box<TlsStream<RingSocket>>),
}

impl Link {
    pub(super) fn socket(&self) -> &RingSocket {
        match self {
            Link::Plain(s) => s,
            Link::Tls(s) => s.carrier(),
        }
    }

    /// Hands the socket a TLS session's records that found its queue
    /// full: whether nothing is left (always, without TLS).
    pub(super) fn flush_pending(&self) -> bool {
        match self {
            Link::Plain(_) => true,
            Link::Tls(s) => s.flush_pending().unwrap_or(true),
        }
    }

    pub(super) fn into_socket(self) -> RingSocket {
        match self {
            Link::Plain(s) => s,
            Link::Tls(s) => s.into_carrier(),
        }
    }

    /// Runs the connection as far as it can go now. `arrived` is what the
    /// receive being handled brought, still in its ring buffer: a plain
    /// connection's reads copy it straight into the connection's buffer,
    /// and what they leave waits in the inbox. A TLS session reads its
    /// records from the inbox, through the `Wire`.
    pub(super) fn drive(
        &self,
        conn: &mut Connection,
        mut arrived: &[u8],
        p: &Pipeline,
        stopping: bool,
    ) -> Want {
        let socket = match self {
            Link::Plain(socket) => socket,
            Link::Tls(session) => {
                session.carrier().arrived(arrived);
                return conn.drive(&**session, p, stopping);
            }
        };
        let want = loop {
            match conn.step(socket, p, stopping) {
                Io::Read => {
                    let read = socket.io.borrow_mut().read_arrived(conn.read_room(), &mut arrived);
                    conn.received(read);
                }
                Io::Send { limit } => {
                    let sent = socket.queue_response(conn.outbound(), limit);
                    conn.sent(sent);
                }
                Io::Prioritize { priority, unsent_limit } => {
                    if let Some(bytes) = unsent_limit {
                        let _ = Wire::set_unsent_limit(&socket.sock, bytes);
                    }
                    let _ = Wire::set_priority(&socket.sock, priority);
                }
                Io::ShutdownWrite => socket.io.borrow_mut().shut = true,
                Io::Wait(want) => break want,
            }
        };
        if !arrived.is_empty() {
            socket.arrived(arrived);
        }
        conn.set_gauge(&want);
        want
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::TcpListener;
    use std::sync::Arc;

    fn socket() -> (RingSocket, TcpStream) {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        (RingSocket::new(l.accept().unwrap().0, false, false), client)
    }

    fn sent_bytes(batch: &Batch) -> Vec<u8> {
        batch.pieces().iter().flat_map(|d| d.as_slice().to_vec()).collect()
    }

    #[test]
    fn reads_take_what_arrived_then_say_not_now_then_the_end() {
        let (s, _c) = socket();
        let mut buf = [0u8; 4];
        assert_eq!(Carrier::recv(&s, &mut buf, false).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        s.arrived(b"hello");
        assert_eq!(Carrier::recv(&s, &mut buf, false).unwrap(), 4);
        assert_eq!(&buf, b"hell");
        assert_eq!(s.peek(&mut buf, false).unwrap(), 1);
        assert_eq!(Carrier::recv(&s, &mut buf, false).unwrap(), 1);
        assert_eq!(s.unread(), 0);
        s.ended(0);
        assert_eq!(Carrier::recv(&s, &mut buf, false).unwrap(), 0);
    }

    #[test]
    fn a_read_takes_the_inbox_first_then_the_arrived_bytes_then_says_not_now_or_the_end() {
        let (s, _c) = socket();
        let mut io = s.io.borrow_mut();
        let mut room = [0u8; 4];
        let mut arrived: &[u8] = b"";
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        io.inbox.extend_from_slice(b"ab");
        let mut arrived: &[u8] = b"cdefg";
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap(), 2);
        assert_eq!(&room[..2], b"ab", "what waited is read before what just came");
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap(), 4);
        assert_eq!((&room, arrived), (b"cdef", &b"g"[..]), "straight from the arrived bytes, up to the room");
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap(), 1);
        assert_eq!((room[0], arrived.len()), (b'g', 0));
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap_err().kind(), io::ErrorKind::WouldBlock);
        // The end comes after the bytes that wait.
        io.inbox.extend_from_slice(b"xyz");
        io.end = Some(0);
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap(), 3);
        assert_eq!(&room[..3], b"xyz");
        assert_eq!(io.read_arrived(&mut room, &mut arrived).unwrap(), 0);
        io.end = Some(libc::ECONNRESET);
        let e = io.read_arrived(&mut room, &mut arrived).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ECONNRESET));
    }

    /// A plain connection driven with a receive's bytes: what does not fit
    /// its read room, or comes while it is blocked writing, waits in the
    /// inbox and is read, in order, at its next read — before the peer's
    /// end, which arrived after it.
    #[test]
    fn arrived_bytes_the_connection_cannot_take_yet_wait_and_come_before_the_end() {
        use pipeline::accesslog::LogTarget;
        use pipeline::{AccessLog, ConnInfo, ErrorLog, Mode, Settings, Site};
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("small.txt"), "small").unwrap();
        let big: Vec<u8> = (0..SEND_WINDOW * 2).map(|i| (i % 251) as u8).collect();
        std::fs::write(dir.path().join("big.bin"), &big).unwrap();
        let site = Site::dir(dir.path(), false).unwrap();
        let access = Arc::new(AccessLog::open(LogTarget::Off).unwrap());
        let p = Pipeline::new(Settings::default(), site, access, Arc::new(ErrorLog::stderr()));
        let (s, c) = socket();
        let link = Link::Plain(s);
        let s = link.socket();
        let peer = c.local_addr().unwrap();
        let mut conn = Connection::new(ConnInfo { peer }, Instant::now(), &p, Mode::Inline);
        // Most of a head: the connection keeps it and waits for the rest.
        let first = format!("GET /big.bin HTTP/1.1\r\nHost: x\r\nX-Pad: {}", "a".repeat(3000));
        assert!(matches!(link.drive(&mut conn, first.as_bytes(), &p, false), Want::Read(_)));
        assert_eq!(s.unread(), 0, "all of it read");
        // Its end and a second request, more than the room left: the
        // first response fills the send window before the second is read.
        let second =
            format!("\r\n\r\nGET /small.txt HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "b".repeat(1500));
        assert!(second.len() > 4096 - first.len());
        assert!(matches!(link.drive(&mut conn, second.as_bytes(), &p, false), Want::Write(_)));
        let waiting = s.unread();
        assert!(waiting > 0 && waiting < second.len(), "{waiting} bytes wait in the inbox");
        // The peer's end comes after the bytes.
        s.ended(0);
        let mut sent = Vec::new();
        let want = loop {
            let batch = s.take_batch().expect("a drive that wants to write queued bytes");
            s.sent(batch.left());
            sent.extend(sent_bytes(&batch));
            drop(batch);
            match link.drive(&mut conn, b"", &p, false) {
                Want::Write(_) => {}
                want => break want,
            }
        };
        assert_eq!(want, Want::Close, "the end, once the second request is answered");
        while let Some(batch) = s.take_batch() {
            s.sent(batch.left());
            sent.extend(sent_bytes(&batch));
        }
        let split = sent.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        assert!(sent.starts_with(b"HTTP/1.1 200 "));
        assert!(sent[split..split + big.len()] == big[..], "the first body, whole");
        let rest = String::from_utf8_lossy(&sent[split + big.len()..]).into_owned();
        assert!(rest.starts_with("HTTP/1.1 200 ") && rest.ends_with("\r\n\r\nsmall"), "{rest}");
        assert_eq!(s.unread(), 0);
    }

    #[test]
    fn a_response_is_queued_by_reference_and_copy_and_pauses_at_the_window() {
        let (s, _c) = socket();
        let mut file = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut file, &vec![b'f'; SEND_WINDOW]).unwrap();
        let shared: Arc<[u8]> = Arc::from(&b"..cached.."[..]);
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Owned(b"HEAD ".to_vec())));
        out.push(Chunk::Bytes(Data::Shared(shared, 2..8)));
        out.push(Chunk::File { file: Arc::new(file), offset: 0, len: SEND_WINDOW as u64 });
        // The window fills before the file's end: not now.
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Blocked);
        let mut batch = s.take_batch().unwrap();
        let bytes = sent_bytes(&batch);
        assert_eq!(bytes.len(), SEND_WINDOW);
        assert!(bytes.starts_with(b"HEAD cached") && bytes.ends_with(b"ff"));
        assert_eq!(batch.pieces().len(), 3, "head copied, cache shared, file read");
        // Still nothing: the whole window is in flight.
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Blocked);
        assert!(s.take_batch().is_none());
        // A partial completion moves the iovecs on.
        assert!(!batch.advance(3));
        s.sent(3);
        assert_eq!(batch.left(), SEND_WINDOW - 3);
        assert!(batch.advance(SEND_WINDOW - 3));
        s.sent(SEND_WINDOW - 3);
        drop(batch);
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Done);
        assert_eq!(sent_bytes(&s.take_batch().unwrap()).len(), 11, "the file's rest");
        assert_eq!(out.bytes_sent(), SEND_WINDOW as u64 + 11);
    }

    #[test]
    fn a_file_piece_is_queued_unread_cut_at_a_page_and_ends_its_batch() {
        let (s, _c) = {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let client = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            (RingSocket::new(l.accept().unwrap().0, true, false), client)
        };
        let file = Arc::new(tempfile::tempfile().unwrap());
        let mut out = Outbound::new();
        out.push(Chunk::Bytes(Data::Owned(b"HEAD ".to_vec())));
        out.push(Chunk::File { file: file.clone(), offset: 0, len: 1 << 20 });
        out.push(Chunk::Bytes(Data::Static(b"tail")));
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Blocked);
        // Not read (the file is empty): queued by reference, to the last
        // page boundary the window allows.
        let page = rustix::param::page_size();
        let piece = (SEND_WINDOW - 5) / page * page;
        assert_eq!(out.bytes_sent(), 5 + piece as u64);
        let batch = s.take_batch().unwrap();
        assert_eq!((sent_bytes(&batch), batch.left()), (b"HEAD ".to_vec(), 5));
        assert!(batch.file.is_some(), "the piece ends the batch");
        s.sent(5 + piece);
        drop(batch);
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Blocked);
        assert_eq!(out.bytes_sent(), 5 + piece as u64 + SEND_WINDOW as u64, "a whole window, from a page");
        let batch = s.take_batch().unwrap();
        assert_eq!(batch.left(), 0, "nothing in memory before the second piece");
        s.sent(SEND_WINDOW);
        drop(batch);
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Blocked);
        // Pieces of a window each, then the last, then the tail in a batch of its own.
        loop {
            let progress = s.queue_response(&mut out, u64::MAX).unwrap();
            let batch = s.take_batch().unwrap();
            assert!(batch.file.is_some() && batch.left() == 0);
            s.sent(SEND_WINDOW);
            if progress == Progress::Done {
                break;
            }
        }
        assert_eq!(sent_bytes(&s.take_batch().unwrap()), b"tail");
        assert_eq!(out.bytes_sent(), 5 + (1 << 20) + 4);
        // A range that does not continue the piece queued waits for it to go.
        let mut out = Outbound::new();
        out.push(Chunk::File { file: file.clone(), offset: 0, len: 10 });
        out.push(Chunk::File { file, offset: 0, len: 10 });
        assert_eq!(s.queue_response(&mut out, u64::MAX).unwrap(), Progress::Blocked);
        assert_eq!(out.bytes_sent(), 10);
    }

    #[test]
    fn a_failed_send_fails_every_later_write_and_the_shutdown_waits_for_the_queue() {
        let (s, _c) = socket();
        assert_eq!(Carrier::send(&s, &[IoSlice::new(b"abc")]).unwrap(), 3);
        Carrier::shutdown_write(&s);
        assert!(!s.take_shutdown(), "bytes are queued");
        let batch = s.take_batch().unwrap();
        assert!(!s.take_shutdown(), "bytes are in flight");
        s.sent(batch.left());
        assert!(s.take_shutdown());
        assert!(!s.take_shutdown(), "once");
        s.send_failed(libc::EPIPE);
        assert_eq!(Carrier::send(&s, &[IoSlice::new(b"x")]).unwrap_err().raw_os_error(), Some(libc::EPIPE));
    }
}
