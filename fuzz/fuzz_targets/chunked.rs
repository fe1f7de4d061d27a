//! The chunked decoder gives one answer however its input is cut: the
//! same decoded bytes, the same end, the same error. The first byte of
//! the input chooses where it is cut.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// Decodes `pieces` in order: (decoded bytes, bytes consumed, done, error).
fn decode(pieces: &[&[u8]]) -> (Vec<u8>, usize, bool, Option<String>) {
    let mut d = h1::ChunkedDecoder::new(1 << 20);
    let mut out = Vec::new();
    let mut consumed = 0;
    for piece in pieces {
        match d.decode(piece, &mut out) {
            Ok(n) => {
                consumed += n;
                if d.is_done() {
                    return (out, consumed, true, None);
                }
            }
            Err(e) => return (out, consumed, false, Some(format!("{e:?}"))),
        }
    }
    (out, consumed, d.is_done(), None)
}

fuzz_target!(|data: &[u8]| {
    let Some((&cut, input)) = data.split_first() else { return };
    let whole = decode(&[input]);
    let at = usize::from(cut) % (input.len() + 1);
    let split = decode(&[&input[..at], &input[at..]]);
    assert_eq!(whole.0, split.0, "the same data");
    assert_eq!(whole.2, split.2, "the same end");
    assert_eq!(whole.3, split.3, "the same error");
    if whole.2 {
        assert_eq!(whole.1, split.1, "the body ends at the same byte");
        assert_eq!(whole.0.len() as u64, whole.0.len() as u64);
    }
    let bytes = (0..input.len()).map(|i| &input[i..i + 1]).collect::<Vec<_>>();
    let by_byte = decode(&bytes);
    assert_eq!(whole.0, by_byte.0);
    assert_eq!(whole.3, by_byte.3);
});
