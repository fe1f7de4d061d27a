//! The head being received: parsed as its bytes arrive, each looked at once
//! ([`h1::HeadScan`]), so a head dribbled a byte at a time costs linear work
//! and a byte that breaks a rule is answered as it arrives, not at the end
//! of its line.

use h1::{ParseError, Parsed};

use super::{Connection, SPARE_HEADS};
use crate::spares;

impl Connection {
    /// The verdict on the head in the buffer so far: the same as a fresh
    /// `h1::parse_request` of it, looking only at the bytes not seen before.
    pub(super) fn parse_head(&mut self, limits: &h1::Limits) -> Result<Parsed, ParseError> {
        let mut spare = spares::take(&SPARE_HEADS);
        let parsed = self.head_scan.parse(&self.buf[self.start..self.end], limits, &mut spare);
        if let Some(spare) = spare {
            spares::give_back(&SPARE_HEADS, spare);
        }
        parsed
    }
}
