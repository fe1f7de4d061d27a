//! The request-head parser's verdict is a function of the bytes alone: every
//! prefix of an input gets `Partial` or the whole input's verdict (the same
//! complete head, or the same refusal), and a `HeadScan` fed the input in
//! pieces answers each piece as a fresh parse of it does. A complete head
//! also parses the same from exactly its own bytes.
//!
//! A first byte below 8 chooses the limits (small ones reach every limit
//! with short inputs) and is not part of the head; any other first byte
//! starts the head, under the default limits.
#![no_main]
use h1::{HeadScan, Limits, Parsed};
use libfuzzer_sys::fuzz_target;

fn limits(selector: u8) -> Limits {
    let d = Limits::default();
    match selector {
        1 => Limits { max_header_bytes: 64, ..d },
        2 => Limits { max_field_size: 16, ..d },
        3 => Limits { max_request_line: 16, ..d },
        4 => Limits { max_headers: 2, ..d },
        5 => Limits { max_request_line: 24, max_header_bytes: 96, max_headers: 3, max_field_size: 16 },
        // A request line allowed longer than the whole head.
        6 => Limits { max_request_line: 200, max_header_bytes: 40, ..d },
        _ => d,
    }
}

fuzz_target!(|data: &[u8]| {
    let (limits, data) = match data.split_first() {
        Some((&selector, rest)) if selector < 8 => (limits(selector), rest),
        _ => (Limits::default(), data),
    };
    let whole = h1::parse_request(data, &limits);
    if let Ok(Parsed::Complete { head, len }) = &whole {
        assert!(*len <= data.len());
        match h1::parse_request(&data[..*len], &limits) {
            Ok(Parsed::Complete { head: again, len: again_len }) => {
                assert_eq!(again_len, *len);
                assert!(again == *head, "the same head from its own bytes");
            }
            other => panic!("a complete head's own bytes gave {other:?}"),
        }
    }
    // Every prefix, through a scan fed a byte at a time (linear work): each
    // answers Partial until the first that does not, which is the whole's.
    let mut scan = HeadScan::new();
    let mut decided = None;
    for end in 0..=data.len() {
        let got = scan.parse(&data[..end], &limits, &mut None);
        if got != Ok(Parsed::Partial) {
            assert!(got == whole, "prefix {end} of {} bytes gave {got:?}, the whole {whole:?}", data.len());
            decided = Some(end);
            break;
        }
    }
    let decided = decided.unwrap_or_else(|| {
        assert_eq!(whole, Ok(Parsed::Partial));
        data.len() + 1
    });
    // Fresh parses of a spread of prefixes and of those around the decision
    // say the same as the byte-at-a-time scan.
    let step = (data.len() / 32).max(1);
    let cuts = (0..=data.len()).step_by(step).chain(decided.saturating_sub(3)..(decided + 3).min(data.len() + 1));
    for cut in cuts {
        let prefix = h1::parse_request(&data[..cut], &limits);
        let want = if cut < decided { Ok(Parsed::Partial) } else { whole.clone() };
        assert!(prefix == want, "prefix {cut} of {} bytes gave {prefix:?}, not {want:?}", data.len());
    }
    // A scan resumed over three pieces, cut where the data says.
    let (a, b) = match data {
        [x, y, ..] => {
            let (x, y) = (usize::from(*x) * data.len() / 256, usize::from(*y) * data.len() / 256);
            (x.min(y), x.max(y))
        }
        _ => (0, 0),
    };
    let mut scan = HeadScan::new();
    for end in [a, b, data.len()] {
        let got = scan.parse(&data[..end], &limits, &mut None);
        assert_eq!(got, h1::parse_request(&data[..end], &limits), "resumed at {end} (pieces {a}, {b})");
        if got != Ok(Parsed::Partial) {
            break;
        }
    }
});
