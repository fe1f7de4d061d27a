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
    /// `max` (one read more); it is made on first use. `Err` when it could
    /// not be made (then `Unavailable`: said once, by the caller).
    pub(crate) fn has_room(&mut self, max: u64) -> io::Result<bool> {
        if max == 0 {
            return Ok(false);
        }
        match self {
            Spill::File(f) => Ok(f.written < max),
            Spill::Unavailable => Ok(false),
            Spill::Unused => match SpillFile::new() {
                Ok(f) => {
                    *self = Spill::File(f);
                    Ok(true)
                }
                Err(e) => {
                    *self = Spill::Unavailable;
                    Err(e)
                }
            },
        }
    }

    /// Appends `bytes` after those already waiting; only after
    /// [`has_room`](Self::has_room) said yes.
    pub(crate) fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Spill::File(f) => f.append(bytes),
            _ => Err(io::Error::other("no spill file")),
        }
    }

    /// Moves up to `most` waiting bytes, oldest first, to the end of `out`.
    pub(crate) fn take_into(&mut self, out: &mut Vec<u8>, most: usize) -> io::Result<usize> {
        match self {
            Spill::File(f) => f.take_into(out, most),
            _ => Ok(0),
        }
    }
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
            for chunk in data.chunks(piece) {
                assert!(spill.has_room(u64::MAX).unwrap());
                spill.append(chunk).unwrap();
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
        assert!(!spill.has_room(0).unwrap());
        assert!(matches!(spill, Spill::Unused));
        assert!(spill.has_room(10).unwrap());
        spill.append(b"0123456789").unwrap();
        assert!(!spill.has_room(10).unwrap());
        let mut out = Vec::new();
        assert_eq!(spill.take_into(&mut out, 4).unwrap(), 4);
        assert!(!spill.has_room(10).unwrap(), "not drained yet");
        assert_eq!(spill.take_into(&mut out, 100).unwrap(), 6);
        assert_eq!(out, b"0123456789");
        assert!(spill.has_room(10).unwrap());
        assert_eq!(spill.pending(), 0);
    }
}
