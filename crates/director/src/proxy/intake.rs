//! A request body read whole in REQUEST, before admission (nginx's
//! `proxy_request_buffering`): its first [`PREBUFFER`] bytes stay in the
//! client's input buffer after the head, the rest goes to an unnamed temp
//! file (`crate::spill`, up to `--max-buffered-request`). A slow upload then
//! holds one of the director's connections, which cost a few kilobytes, and
//! no backend slot: the backend gets the body at the speed of the disk.
//!
//! The bytes in the file are the client's own, framing included, so RECEIVE
//! forwards them exactly as it forwards bytes from the socket: the input
//! buffer first, then the file ([`refill`]), then — only if the body was
//! longer than the file may hold — the socket. Bytes that followed a chunked
//! body in the same read (a pipelined request) wait in [`Intake::after`]
//! until the file is drained, so they come after the body.

use std::io;

use h1::{BodyFraming, ChunkedDecoder};

use super::{PREBUFFER, SPILL_READ_SIZE};
use crate::options::Config;
use crate::spill::{Spill, SpillError};

/// What REQUEST keeps of the request it reads, beyond the input buffer.
pub(super) struct Intake {
    /// A chunked body being pre-buffered: its decoder and the bytes after
    /// the head it has consumed.
    pub(super) chunk_scan: Option<(Box<ChunkedDecoder>, usize)>,
    /// Whether the director answered `100 Continue` to the request being read.
    pub(super) interim: Interim,
    /// The body's bytes beyond its first `PREBUFFER`, read before
    /// admission (`--max-buffered-request`).
    pub(super) file: Spill,
    /// Bytes that followed a chunked body in `file`: after it, in order.
    pub(super) after: Vec<u8>,
}

impl Intake {
    pub(super) fn new() -> Intake {
        Intake { chunk_scan: None, interim: Interim::Unanswered, file: Spill::Unused, after: Vec::new() }
    }
}

/// The `100 Continue` of the request being read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(super) enum Interim {
    /// Not sent by the director: a backend's is still owed if the client asked.
    Unanswered,
    /// Sent by the director, which pre-buffers the body itself (RFC 9110
    /// §10.1.1 lets a proxy do so): none is owed when a backend takes it.
    Continued,
}

/// What REQUEST has of a request's body.
pub(super) enum Collected {
    /// Enough to go on: the whole body, or as much as is read before
    /// admission (the rest is streamed under `--body-timeout`).
    Enough,
    /// Read more, the input buffer up to this length.
    More(usize),
    /// A malformed chunked body (no I/O error) or a temp file that could not
    /// be written: answer this status and close.
    Refuse(u16, &'static str, Option<io::Error>),
}

/// Reads the body of the request whose head is `inbuf[..len]` as far as
/// REQUEST does: a `Content-Length` body of at most `PREBUFFER +
/// --max-buffered-request` bytes whole (a longer one is streamed, as with `0`), a
/// chunked one until its end or until the file is full.
/// Never reads past the body's end for `Content-Length`, so nothing of
/// the next request lands between the memory part and the file.
pub(super) fn collect_body(
    inbuf: &mut Vec<u8>,
    intake: &mut Intake,
    framing: BodyFraming,
    len: usize,
    cfg: &Config,
) -> Collected {
    let max_buffered = cfg.max_buffered_request;
    let in_memory = (inbuf.len() - len) as u64;
    match framing {
        BodyFraming::Length(n) if n <= PREBUFFER => {
            if in_memory >= n {
                Collected::Enough
            } else {
                Collected::More(len + n as usize)
            }
        }
        BodyFraming::Length(n) if n > PREBUFFER.saturating_add(max_buffered) => Collected::Enough,
        BodyFraming::Length(n) => {
            if let Err(refused) = spool_beyond_memory(inbuf, intake, len) {
                return refused;
            }
            let have = (inbuf.len() - len) as u64 + intake.file.pending();
            if have >= n {
                return Collected::Enough;
            }
            let next = (n - have).min(SPILL_READ_SIZE as u64) as usize;
            Collected::More(inbuf.len() + next)
        }
        BodyFraming::Chunked => {
            let (decoder, scanned) =
                intake.chunk_scan.get_or_insert_with(|| (Box::new(ChunkedDecoder::new(cfg.max_body)), 0));
            let mut sink = Vec::new();
            match decoder.decode(&inbuf[len + *scanned..], &mut sink) {
                Ok(consumed) => *scanned += consumed,
                Err(e) => {
                    intake.chunk_scan = None;
                    return Collected::Refuse(e.status(), e.reason(), None);
                }
            }
            if decoder.is_done() {
                let end = len + *scanned;
                if intake.file.pending() > 0 {
                    // The body's last bytes after those in the file, and
                    // what followed the body after both, in the order they came.
                    intake.after = inbuf.split_off(end);
                    if let Err(refused) = spool_beyond_memory(inbuf, intake, len) {
                        return refused;
                    }
                }
                return Collected::Enough;
            }
            // The decoder took every byte it was given: all of them are body.
            if in_memory >= PREBUFFER {
                if !intake.file.has_room(max_buffered) {
                    return Collected::Enough;
                }
                if let Err(refused) = spool_beyond_memory(inbuf, intake, len) {
                    return refused;
                }
                if let Some((_, scanned)) = intake.chunk_scan.as_mut() {
                    *scanned = inbuf.len() - len;
                }
                if !intake.file.has_room(max_buffered) {
                    return Collected::Enough;
                }
                return Collected::More(inbuf.len() + SPILL_READ_SIZE);
            }
            Collected::More(len + PREBUFFER as usize)
        }
        BodyFraming::None => Collected::Enough,
    }
}

/// Moves the body's bytes past its first `PREBUFFER` to the file. If no
/// file can be made and none was, the bytes stay where they are and the
/// body is streamed: `Err(Enough)`.
fn spool_beyond_memory(inbuf: &mut Vec<u8>, intake: &mut Intake, len: usize) -> Result<(), Collected> {
    let keep = len + PREBUFFER as usize;
    if inbuf.len() <= keep {
        return Ok(());
    }
    match intake.file.append(&inbuf[keep..]) {
        Ok(_) => {
            inbuf.truncate(keep);
            Ok(())
        }
        Err(SpillError::Create(_)) if intake.file.pending() == 0 => Err(Collected::Enough),
        Err(SpillError::Create(e) | SpillError::Write(e)) => {
            Err(Collected::Refuse(500, "the request body could not be buffered", Some(e)))
        }
    }
}

/// RECEIVE, with the input buffer empty: the next bytes of the body from
/// the file into `inbuf`, then whatever followed the body ([`Intake::after`]).
/// `Ok(false)`: the file is empty, read the socket.
pub(super) fn refill(intake: &mut Intake, inbuf: &mut Vec<u8>) -> io::Result<bool> {
    if intake.file.pending() == 0 {
        return Ok(false);
    }
    intake.file.take_into(inbuf, SPILL_READ_SIZE)?;
    if intake.file.pending() == 0 {
        inbuf.append(&mut intake.after);
    }
    Ok(true)
}
