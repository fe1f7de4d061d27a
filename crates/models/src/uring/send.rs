//! The send a connection has in flight — at most one, so its bytes stay in
//! order: a batch of queued bytes in memory (one `sendmsg`, continued if
//! it comes short), then the file piece that may end it (`files.rs`), then
//! its end, once the kernel holds nothing of it. The [`Batch`] keeps the
//! bytes where the kernel was given them; finished batches and the socket's
//! copy buffers are kept per thread for the next sends.

use std::cell::RefCell;

use io_uring::{cqueue, opcode, squeue, types};
use transport::Data;

use super::files::{self, FileSend};
use super::{user_data, Loop, Waits, OP_SEND, SEND_WINDOW};

/// Copy buffers kept per thread for the next sends.
const SPARES_KEPT: usize = 64;

thread_local! {
    /// Buffers of finished sends, for the next copies (heads, file pieces,
    /// TLS records): a busy loop allocates none per response.
    static SPARES: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
    /// Finished batches, emptied, for the next sends. Boxed: the box is
    /// what is reused, since the kernel is given addresses inside it.
    #[allow(clippy::vec_box)]
    static BATCHES: RefCell<Vec<Box<Batch>>> = const { RefCell::new(Vec::new()) };
}

/// A buffer to copy at least `want` bytes into, for a send.
pub(super) fn spare(want: usize) -> Vec<u8> {
    let mut buf = SPARES.with(|s| s.borrow_mut().pop()).unwrap_or_default();
    buf.reserve(want);
    buf
}

/// A copy buffer the kernel is done with, kept for the next [`spare`].
pub(super) fn give_back(mut buf: Vec<u8>) {
    if buf.capacity() <= SEND_WINDOW {
        buf.clear();
        let _ = SPARES.try_with(|s| {
            let mut s = s.borrow_mut();
            if s.len() < SPARES_KEPT {
                s.push(buf);
            }
        });
    }
}

/// The bytes of one `sendmsg` on their way: they stay here, at the
/// addresses the kernel was given, until the completion (and, for a
/// zero-copy send, its notification) says the kernel is done with them.
/// A file piece, if any, follows them (`uring/files.rs` sends it).
pub(super) struct Batch {
    pieces: Vec<Data>,
    iov: Vec<libc::iovec>,
    msg: libc::msghdr,
    /// The first iovec not wholly sent.
    at: usize,
    left: usize,
    pub(super) file: Option<FileSend>,
}

impl Batch {
    /// A batch of `pieces`, in a box (and vectors) a finished batch left
    /// behind when there is one: a busy loop allocates none per response.
    pub(super) fn new(pieces: &mut Vec<Data>) -> Box<Batch> {
        let mut batch = BATCHES.with(|b| b.borrow_mut().pop()).unwrap_or_else(|| {
            Box::new(Batch {
                pieces: Vec::new(),
                iov: Vec::new(),
                // SAFETY: msghdr is plain old data; all-zero is its empty value.
                msg: unsafe { std::mem::zeroed() },
                at: 0,
                left: 0,
                file: None,
            })
        });
        std::mem::swap(&mut batch.pieces, pieces);
        batch.iov.extend(batch.pieces.iter().map(|d| {
            let s = d.as_slice();
            libc::iovec { iov_base: s.as_ptr() as *mut libc::c_void, iov_len: s.len() }
        }));
        batch.left = batch.iov.iter().map(|v| v.iov_len).sum();
        batch
    }

    /// Done with: its copy buffers and the batch itself are kept for the next ones.
    pub(super) fn recycle(mut self: Box<Batch>) {
        self.release();
        let _ = BATCHES.try_with(|b| {
            let mut b = b.borrow_mut();
            if b.len() < SPARES_KEPT {
                b.push(self);
            }
        });
    }

    fn release(&mut self) {
        for piece in self.pieces.drain(..) {
            if let Data::Owned(buf) = piece {
                give_back(buf);
            }
        }
        self.iov.clear();
        (self.at, self.left) = (0, 0);
        self.file = None;
    }

    #[cfg(test)]
    pub(super) fn pieces(&self) -> &[Data] {
        &self.pieces
    }

    /// Bytes not yet sent.
    pub(super) fn left(&self) -> usize {
        self.left
    }

    /// The message for the bytes not yet sent; it points into this batch.
    pub(super) fn msg(&mut self) -> *const libc::msghdr {
        self.msg.msg_iov = self.iov[self.at..].as_mut_ptr();
        self.msg.msg_iovlen = self.iov.len() - self.at;
        &self.msg
    }

    /// Counts `n` bytes as sent; `true` when none are left.
    pub(super) fn advance(&mut self, mut n: usize) -> bool {
        self.left -= n.min(self.left);
        while n > 0 && self.at < self.iov.len() {
            let v = &mut self.iov[self.at];
            let step = n.min(v.iov_len);
            // SAFETY: `step` is within the slice this iovec names, so the
            // new base stays inside the same piece.
            v.iov_base = unsafe { (v.iov_base as *mut u8).add(step) } as *mut libc::c_void;
            v.iov_len -= step;
            n -= step;
            if v.iov_len == 0 {
                self.at += 1;
            }
        }
        self.left == 0
    }
}

impl Drop for Batch {
    fn drop(&mut self) {
        self.release();
    }
}

impl Loop {
    /// Starts the next operation of the batch in flight: a send of its
    /// bytes in memory not yet sent, else a step of its file piece.
    pub(super) fn send_batch(&mut self, token: u64) {
        let zc_min = self.knobs.zc_min;
        let Some(c) = self.conns.get_mut(token) else { return };
        let Some(batch) = c.batch.as_mut() else { return };
        if batch.left() == 0 {
            return self.send_file(token);
        }
        let slot = types::Fixed(token as u32);
        let msg = batch.msg();
        let mut flags = libc::MSG_NOSIGNAL | libc::MSG_WAITALL;
        if batch.file.is_some() {
            // The head waits for the file's first bytes, as in `event`.
            flags |= libc::MSG_MORE;
        }
        let send = if batch.left() >= zc_min {
            opcode::SendMsgZc::new(slot, msg).flags(flags as u32).build()
        } else {
            opcode::SendMsg::new(slot, msg).flags(flags as u32).build()
        };
        let mut entries = vec![send.user_data(user_data(OP_SEND, token))];
        if self.splice_follows(token) {
            // The file's first pipeful follows the head in the same
            // submission, linked: it starts only once the head is sent
            // whole (a short or failed send cancels it).
            let splices = self.splices(token);
            if !splices.is_empty() {
                entries[0] = entries[0].clone().flags(squeue::Flags::IO_LINK);
                entries.extend(splices);
            }
        }
        if let Some(c) = self.conns.get_mut(token) {
            c.sending += entries.len() as u32;
        }
        // SAFETY: the message and every byte it names live in the boxed
        // batch, which the connection keeps — and does not leave its slot
        // without — until the send's completion (and zero-copy
        // notification) arrives; the splices name only descriptors, which
        // the batch keeps as long. One push: a link must not span two
        // submissions.
        unsafe { self.push(&entries) };
    }

    pub(super) fn sent(&mut self, token: u64, result: i32, flags: u32) {
        let Some(c) = self.conns.get_mut(token) else { return };
        if cqueue::notif(flags) {
            // A zero-copy send's buffers are free.
            c.notifs -= 1;
        } else {
            c.sending -= 1;
            if cqueue::more(flags) {
                c.notifs += 1;
            }
            let socket = c.link.socket();
            let batch = c.batch.as_mut().expect("a send completes for the batch in flight");
            if result < 0 {
                socket.send_failed(-result);
            } else {
                socket.sent(result as usize);
                // What MSG_WAITALL did not finish (interrupted) goes next.
                if !batch.advance(result as usize) && result == 0 {
                    socket.send_failed(libc::EPIPE);
                }
            }
        }
        self.batch_moved(token);
    }

    /// After the batch in flight moved: its next operation, or its end,
    /// once the kernel holds nothing of it.
    pub(super) fn batch_moved(&mut self, token: u64) {
        let Some(c) = self.conns.get_mut(token) else { return };
        if c.sending > 0 {
            return;
        }
        let more = |b: &Batch| b.left() > 0 || b.file.as_ref().is_some_and(files::FileSend::more);
        if !c.link.socket().failed() && c.batch.as_deref().is_some_and(more) {
            self.send_batch(token);
        }
        let Some(c) = self.conns.get_mut(token) else { return };
        if c.sending > 0 || c.notifs > 0 {
            return;
        }
        let Some(mut batch) = c.batch.take() else { return };
        let cut_short = batch.file.take().is_some_and(|piece| self.file_done(piece));
        batch.recycle();
        if cut_short {
            // As `event` does when `sendfile` finds nothing: what was sent
            // stays short, and the connection ends.
            if let Some(c) = self.conns.get_mut(token) {
                c.link.socket().send_failed(libc::EIO);
            }
            self.close(token);
        }
        let Some(c) = self.conns.get_mut(token) else { return };
        if c.closing {
            self.pump(token);
            self.finish_close(token);
            return;
        }
        match c.waits {
            Waits::Write | Waits::Pipes => self.drive(token),
            _ => self.pump(token),
        }
    }
}
