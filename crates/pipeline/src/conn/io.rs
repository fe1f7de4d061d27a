//! Reading into a connection's buffer, from its [`Wire`].

use std::io;

use transport::Wire;

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
    /// Reads into the free tail of the buffer; grows it only while a head
    /// is incomplete (parsing bounds that by `max_header_bytes`).
    ///
    /// With nothing buffered it borrows a spare buffer for the read and
    /// keeps it only if bytes came: a connection that turns out to be idle —
    /// most keep-alive connections, most of the time — then holds none.
    pub(super) fn fill(&mut self, wire: &dyn Wire) -> io::Result<usize> {
        if self.drained {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        if self.start == self.end {
            (self.start, self.end) = (0, 0);
            if self.buf.is_empty() {
                let mut buf = spares::take(&SPARE_BUFFERS).unwrap_or_else(new_read_buffer);
                let read = wire.read(&mut buf);
                if matches!(read, Ok(1..)) {
                    self.buf = buf;
                } else {
                    spares::give_back(&SPARE_BUFFERS, buf);
                }
                let n = read?;
                self.end = n;
                self.drained =
                    self.edge_triggered && !self.eof_pending && n < self.buf.len() && !wire.holds_more();
                return Ok(n);
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
        let room = self.buf.len() - self.end;
        let n = wire.read(&mut self.buf[self.end..])?;
        self.end += n;
        // Zero is end of stream, which ends the connection anyway.
        self.drained = self.edge_triggered && !self.eof_pending && n < room && !wire.holds_more();
        Ok(n)
    }
}
