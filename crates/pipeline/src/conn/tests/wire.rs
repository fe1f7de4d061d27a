//! A [`Wire`] in memory: what the client sent, as byte slices, and what the
//! connection wrote back, so the state machine runs without sockets, sleeps
//! or threads.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;

use transport::{Outbound, Progress, Wire};

/// The client's end of a connection, as the server's wire sees it.
#[derive(Debug, Default)]
pub struct MemoryWire {
    /// Bytes sent by the client and not yet read by the server.
    arrived: RefCell<VecDeque<u8>>,
    /// The client closed its side once `arrived` is read.
    client_done: Cell<bool>,
    /// The client reset the connection: every call fails.
    reset: Cell<bool>,
    /// The most one read returns (a TCP segment); 0: no limit.
    segment: Cell<usize>,
    /// Bytes the send buffer still takes before it is full; `None`: no limit.
    room: Cell<Option<usize>>,
    written: RefCell<Vec<u8>>,
    shut_write: Cell<bool>,
    /// Read calls made, including those that found nothing.
    pub reads: Cell<u32>,
    /// Every priority set, in order.
    pub priorities: RefCell<Vec<u32>>,
    /// The unsent limit set, if any.
    pub unsent_limit: Cell<Option<u32>>,
    /// Bytes written before each priority change (where in the response it came).
    pub priority_at: RefCell<Vec<usize>>,
}

impl MemoryWire {
    pub fn new() -> MemoryWire {
        MemoryWire::default()
    }

    /// The client sends `bytes`.
    pub fn arrive(&self, bytes: &[u8]) {
        self.arrived.borrow_mut().extend(bytes);
    }

    /// The client closes its side (a FIN after what arrived).
    pub fn client_closes(&self) {
        self.client_done.set(true);
    }

    /// The client resets the connection.
    pub fn reset(&self) {
        self.reset.set(true);
    }

    /// Reads return at most `n` bytes each.
    pub fn segments_of(&self, n: usize) {
        self.segment.set(n);
    }

    /// The send buffer takes `n` more bytes, then is full.
    pub fn send_room(&self, n: usize) {
        self.room.set(Some(n));
    }

    /// The send buffer takes everything again.
    pub fn unlimited_room(&self) {
        self.room.set(None);
    }

    /// Everything written since the last call.
    pub fn take_written(&self) -> Vec<u8> {
        std::mem::take(&mut self.written.borrow_mut())
    }

    /// How many bytes were written since [`take_written`](Self::take_written).
    pub fn written_len(&self) -> usize {
        self.written.borrow().len()
    }

    /// Whether the server shut its side (FIN).
    pub fn shut_write(&self) -> bool {
        self.shut_write.get()
    }

    /// Bytes the client sent that the server has not read.
    pub fn unread(&self) -> usize {
        self.arrived.borrow().len()
    }

    fn take_room(&self, want: usize) -> usize {
        match self.room.get() {
            None => want,
            Some(room) => {
                let n = room.min(want);
                self.room.set(Some(room - n));
                n
            }
        }
    }

    fn check_reset(&self) -> io::Result<()> {
        if self.reset.get() {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        Ok(())
    }
}

impl Wire for MemoryWire {
    fn read(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.reads.set(self.reads.get() + 1);
        self.check_reset()?;
        let mut arrived = self.arrived.borrow_mut();
        if arrived.is_empty() {
            return if self.client_done.get() { Ok(0) } else { Err(io::ErrorKind::WouldBlock.into()) };
        }
        let segment = match self.segment.get() {
            0 => usize::MAX,
            n => n,
        };
        let n = buf.len().min(arrived.len()).min(segment);
        for (slot, byte) in buf.iter_mut().zip(arrived.drain(..n)) {
            *slot = byte;
        }
        Ok(n)
    }

    fn read_now(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.read(buf)
    }

    fn write_now(&self, bytes: &[u8]) -> io::Result<usize> {
        self.check_reset()?;
        let n = self.take_room(bytes.len());
        if n == 0 && !bytes.is_empty() {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.written.borrow_mut().extend_from_slice(&bytes[..n]);
        Ok(n)
    }

    fn send(&self, out: &mut Outbound, limit: u64) -> io::Result<Progress> {
        self.check_reset()?;
        let mut allowed = usize::try_from(limit).unwrap_or(usize::MAX);
        while !out.is_empty() {
            if allowed == 0 {
                return Ok(Progress::Paused);
            }
            let room = self.take_room(allowed);
            if room == 0 {
                return Ok(Progress::Blocked);
            }
            let n = out.copy_into(&mut self.written.borrow_mut(), room)?;
            if let Some(left) = self.room.get() {
                // Give back what the response did not use.
                self.room.set(Some(left + room - n));
            }
            if n == 0 {
                return Err(io::ErrorKind::WriteZero.into());
            }
            allowed -= n;
        }
        Ok(Progress::Done)
    }

    fn set_priority(&self, priority: u32) -> io::Result<()> {
        self.priorities.borrow_mut().push(priority);
        self.priority_at.borrow_mut().push(self.written.borrow().len());
        Ok(())
    }

    fn set_unsent_limit(&self, bytes: u32) -> io::Result<()> {
        self.unsent_limit.set(Some(bytes));
        Ok(())
    }

    fn shutdown_write(&self) {
        self.shut_write.set(true);
    }

    fn local_addr(&self) -> Option<SocketAddr> {
        Some(SocketAddr::from(([127, 0, 0, 1], 8080)))
    }
}
