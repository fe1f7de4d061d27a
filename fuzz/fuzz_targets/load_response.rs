//! `modus load`'s response parser gives one answer however the bytes
//! arrive: whole, or cut where the first byte says.
#![no_main]
use libfuzzer_sys::fuzz_target;

use load::http::ResponseParser;

/// Feeds `pieces` as a socket would deliver them: (done, consumed, error, status, body bytes).
fn feed(pieces: &[&[u8]]) -> (bool, usize, bool, u16, u64) {
    let mut p = ResponseParser::new(true);
    let mut buf: Vec<u8> = Vec::new();
    let mut consumed = 0;
    for piece in pieces {
        buf.extend_from_slice(piece);
        match p.feed(&buf, false) {
            Ok(progress) => {
                buf.drain(..progress.consumed);
                consumed += progress.consumed;
                if progress.done {
                    let r = p.response();
                    return (true, consumed, false, r.status, r.body_bytes);
                }
            }
            Err(_) => return (false, consumed, true, 0, 0),
        }
    }
    (false, consumed, false, 0, 0)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else { return };
    let whole = feed(&[input]);
    let at = usize::from(cut) % (input.len() + 1);
    let split = feed(&[&input[..at], &input[at..]]);
    if whole.0 {
        assert_eq!(whole, split, "a response parsed whole parses the same in two pieces");
    }
    if split.2 {
        assert!(whole.2, "an error in pieces is an error whole");
    }
});
