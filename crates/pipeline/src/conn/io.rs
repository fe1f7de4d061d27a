//! Reading into a connection's buffer: where a read goes, and what it brought.

use std::io;

use super::drive::Outcome;
use super::*;
use crate::spares::{self, Spares};

/// Read buffer size, allocated when input is expected; it doubles up to what
/// a maximal head needs.
pub(super) const READ_SIZE: usize = 4096;

thread_local! {
    /// Read buffers of connections that went idle, kept for the next ones
    /// that get data. An idle keep-alive connection holds no buffer (nginx
    /// frees its buffer too), yet a busy server neither allocates nor zeroes
    /// one per request: a loop reuses a few, warm in its cache. Enough for a
    /// loop's burst of ready connections; grown buffers (long heads) are freed.
    pub(super) static SPARE_BUFFERS: Spares<Box<[u8]>> = const { Spares::new(64, |buf| buf.len() == READ_SIZE) };
}

pub(super) fn new_read_buffer() -> Box<[u8]> {
    vec![0; READ_SIZE].into_boxed_slice()
}

impl Connection {
    /// Where the next read goes: the free tail of the buffer, grown only
    /// while a head is incomplete (parsing bounds that by
    /// `max_header_bytes`). Report the read with [`received`](Self::received).
    ///
    /// With nothing buffered it borrows a spare buffer for the read and
    /// keeps it only if bytes came: a connection that turns out to be idle —
    /// most keep-alive connections, most of the time — then holds none.
    pub fn read_room(&mut self) -> &mut [u8] {
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            if self.buf.is_empty() {
                self.buf = spares::take(&SPARE_BUFFERS).unwrap_or_else(new_read_buffer);
                self.outcome = Outcome::Lent;
            }
        } else if self.end == self.buf.len() {
            if self.start > 0 {
                self.buf.copy_within(self.start..self.end, 0);
                self.end -= self.start;
                self.start = 0;
            } else {
                let mut bigger = vec![0; self.buf.len() * 2].into_boxed_slice();
                bigger[..self.end].copy_from_slice(&self.buf[..self.end]);
                self.buf = bigger;
            }
        }
        &mut self.buf[self.end..]
    }

    /// Counts a read into [`read_room`](Self::read_room) in; with it,
    /// whether fewer bytes came than there was room for, and whether they
    /// are the first buffered (a head begins).
    #[inline]
    pub(super) fn take_in(&mut self, read: io::Result<usize>) -> (io::Result<usize>, bool, bool) {
        let room = self.buf.len() - self.end;
        let began = self.start == self.end;
        if let Ok(n) = read {
            self.end += n;
        }
        if std::mem::replace(&mut self.outcome, Outcome::Nothing) == Outcome::Lent && self.end == 0 {
            spares::give_back(&SPARE_BUFFERS, std::mem::take(&mut self.buf));
        }
        let short = matches!(read, Ok(n) if n < room);
        (read, short, began)
    }
}
