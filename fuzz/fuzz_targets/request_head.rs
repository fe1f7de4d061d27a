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
    // Every prefix of a short input; of a long one, a spread of them and
    // those around every line end.
    let cuts: Vec<usize> = if data.len() <= 512 {
        (0..data.len()).collect()
    } else {
        let step = data.len() / 256;
        (0..data.len())
            .filter(|&c| {
                c % step == 0 || data[c.saturating_sub(2)..(c + 2).min(data.len())].contains(&b'\n')
            })
            .collect()
    };
    for &cut in &cuts {
        let prefix = h1::parse_request(&data[..cut], &limits);
        assert!(
            prefix == Ok(Parsed::Partial) || prefix == whole,
            "prefix {cut} of {} bytes gave {prefix:?}, the whole {whole:?}",
            data.len()
        );
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
