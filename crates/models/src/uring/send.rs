//! The send a connection has in flight — at most one, so its bytes stay in
//! order: a batch of queued bytes in memory (one `sendmsg`, continued if
//! it comes short), then the file piece that may end it (`files.rs`), then
//! its end, once the kernel holds nothing of it.

use io_uring::{cqueue, opcode, squeue, types};

use super::socket::Batch;
use super::{files, user_data, Loop, Waits, OP_SEND};

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
