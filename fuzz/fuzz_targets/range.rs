//! Every range a `Range` header selects lies inside the file, the ranges are
//! sorted, disjoint and non-empty, and there are no more of them than the
//! limit allows.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if data.len() < 3 {
        return;
    }
    let len = u64::from(u16::from_le_bytes([data[0], data[1]]));
    let max = usize::from(data[2] % 8) + 1;
    let Ok(header) = std::str::from_utf8(&data[3..]) else { return };
    if let pipeline::range::RangeOutcome::Partial(ranges) = pipeline::range::evaluate(header, len, max) {
        assert!(!ranges.is_empty() && ranges.len() <= max, "{header:?} len {len}: {ranges:?}");
        for r in &ranges {
            assert!(r.start < r.end && r.end <= len, "{header:?} len {len}: {ranges:?}");
        }
        for pair in ranges.windows(2) {
            assert!(pair[0].end <= pair[1].start, "{header:?} len {len}: {ranges:?}");
        }
    }
});
