//! A response read faster than its client takes it: what does not fit in
//! the client's output buffer waits in an unnamed temp file, so the
//! backend connection is free as soon as the backend has sent the whole
//! response, whatever the client's speed. nginx does the same with
//! `proxy_buffering` and `proxy_max_temp_file_size`; the file lives in
//! `$TMPDIR` (or `/tmp`), has no name, and is gone with the exchange.
//!
//! The bytes kept are those the client is sent — `relay::ResponseBody`'s
//! output, framing already rewritten — so the client gets the same bytes
//! whether they waited here or not.

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;

/// A client's output beyond its memory buffer.
#[derive(Debug, Default)]
pub(crate) enum Spill {
    /// Nothing went to a file in this exchange.
    #[default]
    Unused,
    /// The file, and the bytes in it still to go to the client.
    File(SpillFile),
    /// No temp file could be made for this exchange: its response goes at
    /// the client's pace, as with `--max-buffered-response 0`.
    Unavailable,
}

impl Spill {
    /// Bytes waiting in the file.
    pub(crate) fn pending(&self) -> u64 {
        match self {
            Spill::File(f) => f.written - f.read,
            _ => 0,
        }
    }

    /// Whether more bytes may go to the file, which holds at most about
    /// `max` (one read more).
    pub(crate) fn has_room(&self, max: u64) -> bool {
        match self {
            Spill::Unused => max > 0,
            Spill::File(f) => f.written < max,
            Spill::Unavailable => false,
        }
    }

    /// Appends `bytes` after those already waiting, making the file first
    /// if there is none yet; only after [`has_room`](Self::has_room) said
    /// yes. Returns whether it made the file.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> Result<bool, SpillError> {
        let made = match self {
            Spill::File(_) => false,
            Spill::Unavailable => return Err(SpillError::Create(io::ErrorKind::Unsupported.into())),
            Spill::Unused => match SpillFile::new() {
                Ok(f) => {
                    *self = Spill::File(f);
                    true
                }
                Err(e) => {
                    *self = Spill::Unavailable;
                    return Err(SpillError::Create(e));
                }
            },
        };
        let Spill::File(f) = self else { unreachable!("made above") };
        f.append(bytes).map_err(SpillError::Write)?;
        Ok(made)
    }

    /// Moves up to `most` waiting bytes, oldest first, to the end of `out`.
    pub(crate) fn take_into(&mut self, out: &mut Vec<u8>, most: usize) -> io::Result<usize> {
        match self {
            Spill::File(f) => f.take_into(out, most),
            _ => Ok(0),
        }
    }
}

/// Why bytes could not go to the file.
#[derive(Debug)]
pub(crate) enum SpillError {
    /// No file could be made: the bytes are still the caller's, and the
    /// exchange goes on at the client's pace.
    Create(io::Error),
    /// Writing failed (a full disk): part of the response may be lost.
    Write(io::Error),
}

/// The file: bytes are appended at `written` and read back from `read`;
/// once all have been read back both go back to 0, so the file never
/// holds more than the limit however long the response.
#[derive(Debug)]
pub(crate) struct SpillFile {
    file: File,
    written: u64,
    read: u64,
}

impl SpillFile {
    fn new() -> io::Result<SpillFile> {
        Ok(SpillFile { file: tempfile::tempfile()?, written: 0, read: 0 })
    }

    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.file.write_all_at(bytes, self.written)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn take_into(&mut self, out: &mut Vec<u8>, most: usize) -> io::Result<usize> {
        let want = most.min(usize::try_from(self.written - self.read).unwrap_or(usize::MAX));
        let start = out.len();
        out.resize(start + want, 0);
        let mut got = 0;
        while got < want {
            match self.file.read_at(&mut out[start + got..], self.read + got as u64) {
                Ok(0) => {
                    out.truncate(start);
                    // The file is shorter than what was written to it.
                    return Err(io::ErrorKind::UnexpectedEof.into());
                }
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    out.truncate(start);
                    return Err(e);
                }
            }
        }
        self.read += want as u64;
        if self.read == self.written {
            self.read = 0;
            self.written = 0;
        }
        Ok(want)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bytes come back whole and in order, however the appends and the
    /// reads are cut, and the file starts over once drained.
    #[test]
    fn spilled_bytes_come_back_whole_and_in_order() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        for (piece, take) in [(7_001, 65_536), (65_536, 1_000), (1, 3)] {
            let mut spill = Spill::Unused;
            let mut back = Vec::new();
            for (i, chunk) in data.chunks(piece).enumerate() {
                assert!(spill.has_room(u64::MAX));
                assert_eq!(spill.append(chunk).unwrap(), i == 0, "the file is made once");
                if back.len() % 3 == 0 {
                    // Some reads between the appends.
                    spill.take_into(&mut back, take).unwrap();
                }
            }
            while spill.pending() > 0 {
                spill.take_into(&mut back, take).unwrap();
            }
            assert!(back == data, "piece {piece}, take {take}: the bytes read back differ");
            let Spill::File(f) = &spill else { panic!("a file was made") };
            assert_eq!((f.written, f.read), (0, 0), "drained: starts over");
        }
    }

    /// At the limit the file takes no more until the client has read it
    /// all; `0` never makes a file.
    #[test]
    fn the_limit_stops_the_file_until_it_drains() {
        let mut spill = Spill::Unused;
        assert!(!spill.has_room(0));
        assert!(spill.has_room(10));
        spill.append(b"0123456789").unwrap();
        assert!(!spill.has_room(10));
        let mut out = Vec::new();
        assert_eq!(spill.take_into(&mut out, 4).unwrap(), 4);
        assert!(!spill.has_room(10), "not drained yet");
        assert_eq!(spill.take_into(&mut out, 100).unwrap(), 6);
        assert_eq!(out, b"0123456789");
        assert!(spill.has_room(10));
        assert_eq!(spill.pending(), 0);
    }
}
