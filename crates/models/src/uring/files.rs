//! How `uring` sends a file chunk (`MODUS_URING_FILES`), and the zero-copy
//! paths' half of the loop.
//!
//! * **copy**: the socket reads the file into its send queue (`pread`) and
//!   the bytes go out in a `sendmsg`, like a cached body; the cache keeps
//!   files up to `INLINE_MAX_COPY` as bytes.
//! * **splice**: a file piece goes file → pipe → socket as
//!   two linked `IORING_OP_SPLICE`s, through a pipe of the loop's
//!   [`Pipes`], one pipeful at a time; the page cache's pages are lent to
//!   the socket, never copied. The kernel runs every ring splice on an
//!   io-wq worker thread (`io_uring/splice.c` marks it `REQ_F_FORCE_ASYNC`;
//!   on this kernel the server shows `iou-wrk-*` threads while it sends a
//!   file), so each pipeful costs two hand-offs to a worker, and a worker
//!   waits as long as a slow peer's socket is full: a thread per such peer
//!   until the send timeout cancels its splice (io-wq's unbound workers are
//!   bounded only by `RLIMIT_NPROC`; capping them with
//!   `IORING_REGISTER_IOWQ_MAX_WORKERS` would queue every other
//!   connection's splices behind the slow ones).
//! * **sendfile** (the default): the loop calls `sendfile` itself on the
//!   socket (which is then non-blocking); when the socket is full, a
//!   one-shot `POLLOUT` poll says when to go on. No worker threads, but a
//!   system call per piece outside the ring's batches. Measured here
//!   (`bench/uring.sh`, BENCHMARKS.md "io_uring: how files go out") it is
//!   the cheapest of the three at 50 KB and 115 KB; at 1 MB all three cost
//!   more than `event`.
//!
//! With splice or sendfile the server keeps cached files only up to
//! `INLINE_MAX_SENDFILE` as bytes (as for `event`), so larger ones reach
//! this path. Under TLS files are read into records, whatever the knob.
//!
//! A piece is part of the connection's batch (`socket.rs`): after the
//! bytes queued before it, and the only send of the connection in flight,
//! so the bytes stay in order. A fill that brings less than asked (the
//! file shrank, or a page came short) breaks the link: its drain completes
//! `ECANCELED`, and what is in the pipe goes next; a fill of nothing ends
//! the connection after what was sent, as `event`'s `sendfile` of nothing
//! does. A pipe goes back to the pool only empty: one left holding bytes
//! (the socket failed, or the send timed out) is closed.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use io_uring::{opcode, squeue, types};

use super::{user_data, Loop, OP_DRAIN, OP_FILL, SEND_WINDOW};

/// How file chunks leave, from `MODUS_URING_FILES`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum FilePath {
    Copy,
    Splice,
    Sendfile,
}

impl FilePath {
    /// `MODUS_URING_FILES`: `copy`, `splice` or `sendfile`; unset: sendfile.
    pub(super) fn from_env() -> io::Result<FilePath> {
        FilePath::parse(std::env::var("MODUS_URING_FILES").ok().as_deref())
    }

    fn parse(value: Option<&str>) -> io::Result<FilePath> {
        match value {
            None | Some("" | "sendfile") => Ok(FilePath::Sendfile),
            Some("copy") => Ok(FilePath::Copy),
            Some("splice") => Ok(FilePath::Splice),
            Some(other) => Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("MODUS_URING_FILES={other:?}: the file paths are copy, splice and sendfile"),
            )),
        }
    }
}

/// Whether `uring` will send files from the file (splice or sendfile),
/// not from memory: the server then keeps fewer of them as bytes.
pub(crate) fn sends_files() -> bool {
    FilePath::from_env().is_ok_and(|path| path != FilePath::Copy)
}

/// What a pipe is asked to hold: the connection's whole send window, so a
/// piece usually moves in one fill and one drain.
const PIPE_SIZE: usize = SEND_WINDOW;
/// Empty pipes a loop keeps for the next pieces.
const PIPES_KEPT: usize = 16;

pub(super) struct Pipe {
    read: OwnedFd,
    write: OwnedFd,
    /// Bytes it holds (`F_SETPIPE_SZ` may have been refused).
    size: usize,
}

impl Pipe {
    fn new() -> io::Result<Pipe> {
        let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
        // Over `fs.pipe-max-size` or the user's pipe budget the kernel
        // refuses; the pipe then keeps the size it has.
        let size = rustix::pipe::fcntl_setpipe_size(&write, PIPE_SIZE)
            .or_else(|_| rustix::pipe::fcntl_getpipe_size(&write))?;
        Ok(Pipe { read, write, size })
    }
}

/// Pipes open and lent out, for the tests to see none is leaked.
#[derive(Debug, Default)]
pub(super) struct PipeCount {
    pub(super) open: AtomicUsize,
    pub(super) lent: AtomicUsize,
}

/// The loop's empty pipes.
#[derive(Default)]
pub(super) struct Pipes {
    idle: Vec<Pipe>,
    count: Arc<PipeCount>,
}

impl Pipes {
    fn take(&mut self) -> io::Result<Pipe> {
        let pipe = match self.idle.pop() {
            Some(pipe) => pipe,
            None => {
                let pipe = Pipe::new()?;
                self.count.open.fetch_add(1, Ordering::Relaxed);
                pipe
            }
        };
        self.count.lent.fetch_add(1, Ordering::Relaxed);
        Ok(pipe)
    }

    /// Takes a pipe back: kept if it is empty and the pool has room, else closed.
    fn put(&mut self, pipe: Pipe, empty: bool) {
        if empty && self.idle.len() < PIPES_KEPT {
            self.idle.push(pipe);
        } else {
            drop(pipe);
            self.count.open.fetch_sub(1, Ordering::Relaxed);
        }
        self.count.lent.fetch_sub(1, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(super) fn count(&self) -> Arc<PipeCount> {
        self.count.clone()
    }
}

impl Drop for Pipes {
    fn drop(&mut self) {
        let idle = std::mem::take(&mut self.idle).len();
        self.count.open.fetch_sub(idle, Ordering::Relaxed);
    }
}

/// A range of a file to send without reading it into memory.
#[derive(Debug)]
pub(super) struct FilePiece {
    pub(super) file: Arc<File>,
    pub(super) offset: u64,
    pub(super) len: usize,
}

/// A file piece on its way, with the pipe it goes through.
pub(super) struct FileSend {
    file: Arc<File>,
    /// The next byte to read from the file.
    offset: u64,
    /// Bytes of the piece not yet read from the file.
    unread: usize,
    pipe: Option<Pipe>,
    /// Bytes in the pipe, not yet sent.
    in_pipe: usize,
    /// The file ended (or could not be read) before the piece did.
    ended: bool,
}

impl FileSend {
    pub(super) fn new(piece: FilePiece) -> FileSend {
        FileSend {
            file: piece.file,
            offset: piece.offset,
            unread: piece.len,
            pipe: None,
            in_pipe: 0,
            ended: false,
        }
    }

    /// Whether bytes of the piece are still to be sent.
    pub(super) fn more(&self) -> bool {
        self.in_pipe > 0 || self.unread > 0 && !self.ended
    }
}

/// The page size, for the pipe's slots: a pipe holds one page per slot.
fn page() -> usize {
    rustix::param::page_size()
}

impl Loop {
    /// Starts the next step of the file piece of the connection's batch
    /// (its bytes in memory are sent): a drain of what is in the pipe, or
    /// the next pipeful; with `sendfile`, as much as the socket takes.
    pub(super) fn send_file(&mut self, token: u64) {
        let path = self.knobs.files;
        let Some(c) = self.conns.get_mut(token) else { return };
        let socket = c.link.socket();
        let Some(piece) = c.batch.as_mut().and_then(|b| b.file.as_mut()) else { return };
        if path == super::FilePath::Sendfile {
            loop {
                if piece.unread == 0 {
                    return;
                }
                let mut at = piece.offset;
                match rustix::fs::sendfile(socket.stream(), &*piece.file, Some(&mut at), piece.unread) {
                    Ok(0) => {
                        piece.ended = true;
                        return;
                    }
                    Ok(n) => {
                        (piece.offset, piece.unread) = (piece.offset + n as u64, piece.unread - n);
                        socket.sent(n);
                    }
                    Err(rustix::io::Errno::INTR) => {}
                    Err(rustix::io::Errno::AGAIN) => break,
                    Err(e) => return socket.send_failed(e.raw_os_error()),
                }
            }
            c.sending += 1;
            let poll = opcode::PollAdd::new(types::Fixed(token as u32), libc::POLLOUT as u32).build();
            // SAFETY: a poll names no memory; the socket's slot stays its
            // own while the batch is in flight.
            unsafe { self.push(&[poll.user_data(user_data(OP_DRAIN, token))]) };
            return;
        }
        let entries = self.splices(token);
        if let Some(c) = self.conns.get_mut(token) {
            c.sending += entries.len() as u32;
        }
        // SAFETY: a splice names descriptors, no memory: the file and the
        // pipe stay in the batch, and the socket's slot stays its own,
        // until every completion has arrived.
        unsafe { self.push(&entries) };
    }

    /// Whether the batch's file piece goes through a pipe and has not
    /// started: its first fill and drain may be linked after the batch's
    /// `sendmsg`.
    pub(super) fn splice_follows(&self, token: u64) -> bool {
        let piece = self.conns.get(token).and_then(|c| c.batch.as_ref()?.file.as_ref());
        self.knobs.files == super::FilePath::Splice && piece.is_some_and(|p| p.in_pipe == 0 && p.unread > 0)
    }

    /// The splices that move the file piece on (a drain of what is in the
    /// pipe, or a fill linked to its drain), for the caller to push and count;
    /// none if no pipe can be had (the send then fails).
    pub(super) fn splices(&mut self, token: u64) -> Vec<squeue::Entry> {
        let Some(c) = self.conns.get_mut(token) else { return Vec::new() };
        let socket = c.link.socket();
        let Some(piece) = c.batch.as_mut().and_then(|b| b.file.as_mut()) else { return Vec::new() };
        let pipe = match piece.pipe.take().map_or_else(|| self.pipes.take(), Ok) {
            Ok(pipe) => piece.pipe.insert(pipe),
            Err(e) => {
                socket.send_failed(e.raw_os_error().unwrap_or(libc::EMFILE));
                return Vec::new();
            }
        };
        let socket_slot = types::Fixed(token as u32);
        let (read, write) = (types::Fd(pipe.read.as_raw_fd()), types::Fd(pipe.write.as_raw_fd()));
        if piece.in_pipe > 0 {
            let more = if piece.unread > 0 { libc::SPLICE_F_MORE } else { 0 };
            let drain = opcode::Splice::new(read, -1, socket_slot, -1, piece.in_pipe as u32).flags(more);
            vec![drain.build().user_data(user_data(OP_DRAIN, token))]
        } else {
            // A pipe holds one page per slot: from an offset inside a page
            // the first slot holds less.
            let n = piece.unread.min(pipe.size - piece.offset as usize % page());
            let more = if piece.unread > n { libc::SPLICE_F_MORE } else { 0 };
            let file = types::Fd(piece.file.as_fd().as_raw_fd());
            let fill = opcode::Splice::new(file, piece.offset as i64, write, -1, n as u32);
            let drain = opcode::Splice::new(read, -1, socket_slot, -1, n as u32).flags(more);
            vec![
                fill.build().flags(squeue::Flags::IO_LINK).user_data(user_data(OP_FILL, token)),
                drain.build().user_data(user_data(OP_DRAIN, token)),
            ]
        }
    }

    /// A fill, a drain or (sendfile) a poll of the batch's file piece completed.
    pub(super) fn file_moved(&mut self, token: u64, op: u64, result: i32) {
        let Some(c) = self.conns.get_mut(token) else { return };
        c.sending -= 1;
        let socket = c.link.socket();
        let Some(piece) = c.batch.as_mut().and_then(|b| b.file.as_mut()) else { return };
        match (op, result) {
            // Cancelled: by a link (the head's send or the fill came
            // short, and this did not run) or by the send timeout.
            (_, e) if e == -libc::ECANCELED => {}
            // The file could not be read: the connection ends, as when it shrank.
            (OP_FILL, e) if e < 0 => piece.ended = true,
            (_, e) if e < 0 => socket.send_failed(-e),
            (OP_FILL, 0) => piece.ended = true,
            (OP_FILL, n) => {
                let n = n as usize;
                (piece.offset, piece.unread, piece.in_pipe) =
                    (piece.offset + n as u64, piece.unread - n, piece.in_pipe + n);
            }
            // Sendfile's poll: the socket has room.
            _ if piece.pipe.is_none() => {}
            (_, 0) => socket.send_failed(libc::EPIPE),
            (_, n) => {
                piece.in_pipe -= n as usize;
                socket.sent(n as usize);
            }
        }
        self.batch_moved(token);
    }

    /// The batch's file piece is done with: its pipe goes back (or, holding
    /// bytes, is closed). Returns whether the file ended before the piece.
    pub(super) fn file_done(&mut self, piece: FileSend) -> bool {
        if let Some(pipe) = piece.pipe {
            self.pipes.put(pipe, piece.in_pipe == 0);
        }
        piece.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_path_is_sendfile_unless_set_and_a_misspelt_one_is_refused() {
        assert_eq!(FilePath::parse(None).unwrap(), FilePath::Sendfile);
        assert_eq!(FilePath::parse(Some("splice")).unwrap(), FilePath::Splice);
        assert_eq!(FilePath::parse(Some("copy")).unwrap(), FilePath::Copy);
        let e = FilePath::parse(Some("zerocopy")).unwrap_err().to_string();
        assert!(e.contains("MODUS_URING_FILES") && e.contains("splice"), "{e}");
    }

    #[test]
    fn a_pipe_goes_back_to_the_pool_only_empty() {
        let mut pipes = Pipes::default();
        let count = pipes.count();
        let pipe = pipes.take().unwrap();
        assert!(pipe.size >= 4096);
        assert_eq!((count.open.load(Ordering::Relaxed), count.lent.load(Ordering::Relaxed)), (1, 1));
        pipes.put(pipe, true);
        assert_eq!((count.open.load(Ordering::Relaxed), count.lent.load(Ordering::Relaxed)), (1, 0));
        let pipe = pipes.take().unwrap();
        assert_eq!(count.open.load(Ordering::Relaxed), 1, "the idle one, again");
        pipes.put(pipe, false);
        assert_eq!((count.open.load(Ordering::Relaxed), count.lent.load(Ordering::Relaxed)), (0, 0));
        assert!(pipes.idle.is_empty(), "one holding bytes is closed");
    }
}
