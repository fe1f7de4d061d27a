//! Who may open a connection: the per-address cap (`--max-conns-per-ip`,
//! nginx's `limit_conn`, the director's cap) and the refusal a connection
//! gets beyond it or beyond a model's own capacity.
//!
//! The counts live in memory shared by every process of the server (an
//! anonymous shared mapping made before any fork), so a process model's
//! children count one address's connections together: `prefork`, whose
//! children each hold one connection, is exactly the model a single
//! address could otherwise fill.

use std::hash::{BuildHasher, RandomState};
use std::net::{IpAddr, Shutdown as Direction, TcpStream};
use std::sync::atomic::{AtomicU32, Ordering};

use transport::Wire;

use crate::accesslog::first_line;
use crate::{response, LogRecord, Pipeline};

/// Counters in the table: addresses are hashed into them, so two
/// addresses may share one (and then share the cap). With 64 Ki of them a
/// few hundred addresses rarely meet; the hash is keyed at start, so a
/// client cannot choose addresses that meet a victim's.
const SLOTS: usize = 1 << 16;

/// Open connections per client address, shared by every process.
pub struct ConnsPerIp {
    counts: &'static [AtomicU32],
    max: u32,
    hasher: RandomState,
}

impl std::fmt::Debug for ConnsPerIp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnsPerIp").field("max", &self.max).finish_non_exhaustive()
    }
}

/// One admitted connection's place in the count: given back when dropped.
#[derive(Debug)]
pub struct IpSlot {
    count: &'static AtomicU32,
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::AcqRel);
    }
}

impl ConnsPerIp {
    /// A table allowing `max` connections per address (at least one).
    pub fn new(max: usize) -> std::io::Result<ConnsPerIp> {
        let len = SLOTS * std::mem::size_of::<AtomicU32>();
        // SAFETY: a fresh anonymous mapping (no address hint, no file) takes
        // nothing from the rest of the process; it is checked for failure
        // by rustix. It is MAP_SHARED so that children forked later share
        // it, zero-filled by the kernel (0 is a valid AtomicU32), page
        // aligned (more than AtomicU32's 4), `len` bytes long, and never
        // unmapped — the table lives as long as the process, hence the
        // 'static slice. Every access is through the atomics, so threads
        // and processes sharing it never race. Tested by
        // `admission::tests::counts_are_shared_with_a_forked_child`.
        #[allow(unsafe_code)]
        let counts: &'static [AtomicU32] = unsafe {
            let at = rustix::mm::mmap_anonymous(
                std::ptr::null_mut(),
                len,
                rustix::mm::ProtFlags::READ | rustix::mm::ProtFlags::WRITE,
                rustix::mm::MapFlags::SHARED,
            )?;
            std::slice::from_raw_parts(at.cast::<AtomicU32>(), SLOTS)
        };
        Ok(ConnsPerIp {
            counts,
            max: u32::try_from(max.max(1)).unwrap_or(u32::MAX),
            hasher: RandomState::new(),
        })
    }

    /// Counts a connection from `ip`, unless that address already holds
    /// the most allowed.
    pub fn admit(&self, ip: IpAddr) -> Option<IpSlot> {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
            v4 => v4,
        };
        let count = &self.counts[self.hasher.hash_one(ip) as usize % SLOTS];
        let taken =
            count.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < self.max).then_some(n + 1));
        // `then`, not `then_some`: an IpSlot made and dropped would give back a place never taken.
        taken.is_ok().then(|| IpSlot { count })
    }
}

/// An address already holds the most connections `--max-conns-per-ip` allows.
#[derive(Debug, PartialEq, Eq)]
pub struct OverCap;

impl Pipeline {
    /// Admits a connection from `ip` under `--max-conns-per-ip`: `Err` if
    /// the address is at the cap (the caller refuses it with
    /// [`refuse_at_capacity`] and a 429); `Ok(None)` if there is no cap.
    pub fn admit(&self, ip: IpAddr) -> Result<Option<IpSlot>, OverCap> {
        match &self.per_ip {
            None => Ok(None),
            Some(table) => table.admit(ip).map(Some).ok_or(OverCap),
        }
    }
}

/// Turns a connection away because the server is at capacity: `503`, or
/// `429` for an address over `--max-conns-per-ip` (as the director
/// answers; nginx's `limit_conn` says 503 unless told otherwise), with
/// `Retry-After`, written without blocking and without a thread, then
/// closed. Whatever request bytes already arrived are drained first, so
/// the close does not become a reset that destroys the response.
///
/// Over TLS the connection is only closed: a page would cost a handshake,
/// the work the server has no room for (the client sees the close at once,
/// rather than a wait in the backlog).
pub fn refuse_at_capacity(stream: TcpStream, p: &Pipeline, status: u16) {
    if status == 429 {
        p.error_log.warn_once(
            "limit 429",
            format_args!(
                "429 to {}: over --max-conns-per-ip ({} connections); if one address legitimately \
                 opens more (a proxy, a NAT), raise it",
                stream.peer_addr().map_or("?".into(), |a| a.ip().to_string()),
                p.settings.max_conns_per_ip
            ),
        );
    }
    if p.tls.is_some() {
        return;
    }
    let Ok(peer) = stream.peer_addr() else { return };
    if stream.set_nonblocking(true).is_err() {
        return;
    }
    let mut drain = [0u8; 4096];
    let mut first = Vec::new();
    while let Ok(n @ 1..) = stream.read_now(&mut drain) {
        if first.is_empty() {
            first.extend_from_slice(&drain[..n]);
        }
    }
    let mut reply =
        response::error_page(&p.settings, status, h1::Version::Http11, false, false, &[("Retry-After", "1")]);
    let _ = stream.send(&mut reply.out, u64::MAX);
    let _ = stream.shutdown(Direction::Write);
    p.stats.count_response(status, reply.out.bytes_sent());
    if p.access_log.is_enabled() {
        p.access_log.record(&LogRecord {
            peer: peer.ip(),
            user: None,
            request_line: first_line(&first),
            status,
            body_bytes: reply.out.bytes_sent().saturating_sub(reply.head_len),
            referer: None,
            user_agent: None,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_at_most_the_cap_and_a_closed_slot_comes_back() {
        let table = ConnsPerIp::new(2).unwrap();
        let ip: IpAddr = "127.0.0.9".parse().unwrap();
        let a = table.admit(ip).expect("first");
        let _b = table.admit(ip).expect("second");
        assert!(table.admit(ip).is_none(), "a third is over the cap");
        assert!(table.admit("127.0.0.10".parse().unwrap()).is_some(), "another address has its own");
        drop(a);
        let _c = table.admit(ip).expect("a closed connection frees its place");
        // The same address spelled as IPv4-mapped IPv6 is the same address.
        let mapped: IpAddr = "::ffff:127.0.0.9".parse().unwrap();
        assert!(table.admit(mapped).is_none());
    }

    #[test]
    fn counts_are_shared_with_a_forked_child() {
        // A child process (the test binary run again on this one test)
        // would be the honest check, but a fork in a threaded test harness
        // is unsafe; a second mapping of the same table cannot be made
        // either. What sharing needs is MAP_SHARED: /proc says the mapping
        // is shared ('s' in its permissions).
        let table = ConnsPerIp::new(1).unwrap();
        let at = table.counts.as_ptr() as usize;
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let line = maps
            .lines()
            .find(|l| {
                let (range, _) = l.split_once(' ').unwrap();
                let (lo, hi) = range.split_once('-').unwrap();
                let (lo, hi) =
                    (usize::from_str_radix(lo, 16).unwrap(), usize::from_str_radix(hi, 16).unwrap());
                (lo..hi).contains(&at)
            })
            .expect("the table is mapped");
        assert!(line.split_whitespace().nth(1).unwrap().ends_with('s'), "{line}");
    }
}
