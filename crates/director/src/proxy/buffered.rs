//! The one buffered-I/O type every peer of the director has — client,
//! backend connection, admin client, monitor, health check: the bytes read
//! and not yet used, the bytes queued and how far they are written, and
//! what the last readiness event said of each direction. The socket stays
//! in the peer (a client's may be TLS); [`Buffered::fill`] and
//! [`Buffered::flush`] are handed it.

use std::io;

use transport::Wire;

use super::{OUT_CAP, READ_SIZE};

/// What a read brought.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Io {
    Data,
    Eof,
    /// Would block, or the buffer is at its cap.
    Blocked,
    Failed,
}

/// One peer's buffers and readiness.
#[derive(Debug, Default)]
pub(super) struct Buffered {
    /// Read and not yet used.
    pub(super) inbuf: Vec<u8>,
    /// Queued for the peer; `out[..out_pos]` is written already.
    pub(super) out: Vec<u8>,
    out_pos: usize,
    /// The socket may have input: no read has said "would block" since
    /// the last event that said it is readable.
    pub(super) readable: bool,
    /// The same for output.
    pub(super) writable: bool,
}

impl Buffered {
    /// A peer whose socket waits for its first readiness event.
    pub(super) fn new() -> Buffered {
        Buffered::default()
    }

    /// A peer that is read and written as soon as it is there: one whose
    /// every event is handled by reading and writing until "would block".
    pub(super) fn eager() -> Buffered {
        Buffered { readable: true, writable: true, ..Buffered::default() }
    }

    /// A peer with `bytes` to send first (a health check's request).
    pub(super) fn sending(bytes: Vec<u8>) -> Buffered {
        Buffered { out: bytes, ..Buffered::eager() }
    }

    /// What an event said of the socket (edge-triggered: it adds to what is
    /// known, a read or write that would block takes it away).
    pub(super) fn ready(&mut self, readable: bool, writable: bool) {
        self.readable |= readable;
        self.writable |= writable;
    }

    /// Bytes queued and not written yet.
    pub(super) fn unsent(&self) -> usize {
        self.out.len() - self.out_pos
    }

    /// Everything queued has been written.
    pub(super) fn flushed(&self) -> bool {
        self.out_pos == self.out.len()
    }

    /// Reads once into `inbuf`, up to `cap` bytes in it ([`READ_SIZE`] at a
    /// time).
    pub(super) fn fill(&mut self, wire: &dyn Wire, cap: usize) -> Io {
        self.fill_sized(wire, cap, READ_SIZE)
    }

    /// [`fill`](Self::fill) with reads of up to `size` bytes.
    pub(super) fn fill_sized(&mut self, wire: &dyn Wire, cap: usize, size: usize) -> Io {
        if !self.readable || self.inbuf.len() >= cap {
            return Io::Blocked;
        }
        let buf = &mut self.inbuf;
        let start = buf.len();
        buf.resize(start + size.min(cap - start), 0);
        let r = wire.read(&mut buf[start..]);
        match r {
            Ok(0) => {
                buf.truncate(start);
                Io::Eof
            }
            Ok(n) => {
                buf.truncate(start + n);
                Io::Data
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                buf.truncate(start);
                self.readable = false;
                Io::Blocked
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {
                buf.truncate(start);
                Io::Data
            }
            Err(_) => {
                buf.truncate(start);
                Io::Failed
            }
        }
    }

    /// Writes what it can of `out`; `Err` if the peer is gone, `Ok(true)`
    /// if anything was written.
    pub(super) fn flush(&mut self, wire: &dyn Wire) -> Result<bool, ()> {
        let mut progress = false;
        while self.out_pos < self.out.len() && self.writable {
            match wire.write_now(&self.out[self.out_pos..]) {
                Ok(0) => return Err(()),
                Ok(n) => {
                    self.out_pos += n;
                    progress = true;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable = false,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return Err(()),
            }
        }
        // What a TLS session encrypted but could not send yet goes out too.
        match wire.flush_pending() {
            Ok(true) => {}
            Ok(false) => self.writable = false,
            Err(_) => return Err(()),
        }
        if self.out_pos == self.out.len() {
            self.out.clear();
            self.out_pos = 0;
        } else if self.out_pos >= OUT_CAP {
            self.out.drain(..self.out_pos);
            self.out_pos = 0;
        }
        Ok(progress)
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::{Shutdown, TcpListener, TcpStream};

    use super::*;

    /// A connected loopback pair: (the director's end, non-blocking; the
    /// peer's end, blocking).
    fn pair() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let peer = TcpStream::connect(listener.local_addr().expect("addr")).expect("connect");
        let (ours, _) = listener.accept().expect("accept");
        ours.set_nonblocking(true).expect("non-blocking");
        (ours, peer)
    }

    /// Reads until `want` bytes are in, the socket being non-blocking: the
    /// bytes are on their way over loopback, so "would block" only means
    /// "not yet".
    fn fill_until(io: &mut Buffered, wire: &TcpStream, want: usize, cap: usize) {
        while io.inbuf.len() < want {
            io.readable = true;
            match io.fill(wire, cap) {
                Io::Data | Io::Blocked => std::thread::yield_now(),
                other => panic!("read {other:?} with {} of {want} bytes in", io.inbuf.len()),
            }
        }
    }

    #[test]
    fn a_read_stops_at_the_cap_and_at_would_block() {
        let (ours, mut peer) = pair();
        let mut io = Buffered::new();
        assert_eq!(io.fill(&ours, 100), Io::Blocked, "no event yet: no read");
        io.ready(true, false);
        assert_eq!(io.fill(&ours, 100), Io::Blocked, "nothing sent yet");
        assert!(!io.readable, "would-block clears readiness until the next event");

        peer.write_all(b"hello, director").expect("write");
        fill_until(&mut io, &ours, 5, 5);
        assert_eq!(io.inbuf, b"hello", "the cap bounds the buffer");
        io.readable = true;
        assert_eq!(io.fill(&ours, 5), Io::Blocked, "a full buffer reads nothing");
        fill_until(&mut io, &ours, 15, 64);
        assert_eq!(io.inbuf, b"hello, director", "the rest follows in order");
    }

    #[test]
    fn end_of_stream_is_eof_after_the_bytes() {
        let (ours, mut peer) = pair();
        peer.write_all(b"last").expect("write");
        peer.shutdown(Shutdown::Write).expect("shutdown");
        let mut io = Buffered::eager();
        fill_until(&mut io, &ours, 4, 64);
        let end = loop {
            io.readable = true;
            match io.fill(&ours, 64) {
                Io::Blocked => std::thread::yield_now(),
                other => break other,
            }
        };
        assert_eq!(end, Io::Eof);
        assert_eq!(io.inbuf, b"last", "the EOF keeps what came before it");
    }

    #[test]
    fn a_flush_writes_in_order_and_keeps_what_would_block() {
        let (ours, mut peer) = pair();
        let mut io = Buffered::new();
        io.out.extend_from_slice(b"queued");
        assert_eq!(io.flush(&ours), Ok(false), "not writable yet: nothing written");
        assert_eq!(io.unsent(), 6);
        io.ready(false, true);
        assert_eq!(io.flush(&ours), Ok(true));
        assert!(io.flushed() && io.out.is_empty(), "written whole, the queue is empty");
        let mut got = [0; 6];
        peer.read_exact(&mut got).expect("read");
        assert_eq!(&got, b"queued");

        // A peer that reads nothing: the kernel's buffers fill, the write
        // would block, and what is left waits in `out`, unsent.
        let chunk = vec![b'x'; 1 << 20];
        let mut queued = 0;
        while io.writable {
            io.out.extend_from_slice(&chunk);
            queued += chunk.len();
            io.flush(&ours).expect("the peer is there");
        }
        assert!(io.unsent() > 0 && io.unsent() <= queued);
        assert!(io.out.len() - io.unsent() < OUT_CAP, "the written part is dropped past OUT_CAP");
    }

    #[test]
    fn a_flush_to_a_closed_peer_fails() {
        let (ours, peer) = pair();
        drop(peer);
        let mut io = Buffered::eager();
        let chunk = vec![b'x'; 64 * 1024];
        let mut failed = false;
        // The first write may still be taken by the kernel; the reset the
        // closed peer answers it with fails a later one.
        for _ in 0..10_000 {
            io.writable = true;
            io.out.extend_from_slice(&chunk);
            if io.flush(&ours).is_err() {
                failed = true;
                break;
            }
            std::thread::yield_now();
        }
        assert!(failed, "writing to a closed peer never failed");
    }
}
