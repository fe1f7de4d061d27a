//! A request body too large to keep in memory, kept in an unnamed file
//! instead: a script's body is read whole before the script starts (a
//! chunked one's length is the script's `CONTENT_LENGTH`, RFC 3875 §4.1.2,
//! and no thread or process may wait for a slow sender), and a `git push`
//! of 200 MB must not cost 200 MB of memory per connection. nginx does the
//! same with its `client_body_temp_path`; the file lives in `$TMPDIR` (or
//! `/tmp`), has no name, and is gone when the request is.

use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;

/// A body past this many bytes goes to a file (nginx's
/// `client_body_buffer_size` is 8–16 KiB; ours is what the director
/// pre-reads of a body).
pub(crate) const SPOOL_AT: usize = 64 << 10;

/// The spooled body: bytes are appended while it is received, then read
/// back in order as the script takes them.
#[derive(Debug)]
pub(crate) struct Spool {
    file: File,
    len: u64,
    /// Bytes already read back.
    read: u64,
}

impl Spool {
    pub(crate) fn new() -> io::Result<Spool> {
        Ok(Spool { file: tempfile::tempfile()?, len: 0, read: 0 })
    }

    /// Appends `bytes` (received, de-chunked).
    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all(bytes)?;
        self.len += bytes.len() as u64;
        Ok(())
    }

    /// The body's length.
    pub(crate) fn len(&self) -> u64 {
        self.len
    }

    /// Bytes not yet read back.
    pub(crate) fn left(&self) -> u64 {
        self.len - self.read
    }

    /// The next bytes of the body into `buf`: 0 once it has all been read.
    pub(crate) fn read_next(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let want = buf.len().min(usize::try_from(self.left()).unwrap_or(usize::MAX));
        let n = self.file.read_at(&mut buf[..want], self.read)?;
        if n == 0 && want > 0 {
            // The file is shorter than what was written to it.
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.read += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_spooled_body_reads_back_whole_and_in_order() {
        let mut spool = Spool::new().unwrap();
        let body: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for piece in body.chunks(7_001) {
            spool.append(piece).unwrap();
        }
        assert_eq!(spool.len(), body.len() as u64);
        let mut back = Vec::new();
        let mut buf = vec![0; 65_536];
        loop {
            let n = spool.read_next(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            back.extend_from_slice(&buf[..n]);
        }
        assert_eq!(spool.left(), 0);
        assert!(back == body, "the body read back differs");
    }
}
