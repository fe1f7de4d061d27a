//! The order in which responses compete for the outgoing link: first come,
//! first served, or shortest remaining first (SRPT, paper 004 after
//! Harchol-Balter et al.).
//!
//! User space cannot order bytes that already sit in kernel buffers, so
//! SRPT here uses the kernel's own priority, as Harchol-Balter's Linux
//! implementation did: each response's socket gets a `SO_PRIORITY` from
//! the class of its remaining bytes, set again as bytes go out (what is
//! left shrinks, so a response's priority rises as it is served), and
//! `TCP_NOTSENT_LOWAT` keeps few bytes unsent per socket, so the queueing
//! discipline in front of the link sees the order. It takes a qdisc that
//! classifies by priority (README, "Scheduling the outgoing link"); without
//! one every packet shares one queue and the order is FIFO, as before.

use std::time::Duration;

/// How responses are ordered.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Schedule {
    /// In the order the kernel sends them (the default; costs nothing).
    #[default]
    Fifo,
    /// Shortest remaining bytes first, through the socket's priority.
    Srpt(Srpt),
}

impl Schedule {
    /// Whether concurrent misses for one document share one read.
    pub fn groups(&self) -> bool {
        matches!(self, Schedule::Srpt(Srpt { group: true, .. }))
    }
}

/// SRPT's settings: the size classes and what keeps large responses moving.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Srpt {
    /// Upper bounds, in bytes, of the classes but the last, ascending (at
    /// most 7: 8 classes). Class 0 holds the smallest remaining bytes.
    pub cutoffs: Vec<u64>,
    /// A response writing for longer than this is served at class 0: the
    /// bound on starvation (`--srpt-max-wait`).
    pub max_wait: Duration,
    /// `SO_PRIORITY` of class 0; class k is `priority_base + k`
    /// (`--srpt-priority-base`).
    pub priority_base: u32,
    /// `TCP_NOTSENT_LOWAT` of a scheduled socket; 0 leaves the kernel's.
    pub unsent_limit: u32,
    /// Bytes written between two looks at what is left (and so at the
    /// class), for one response.
    pub quantum: u64,
    /// Same-document grouping (`--schedule srpt-group`): concurrent misses
    /// for one document wait for a single read of it.
    pub group: bool,
}

impl Srpt {
    /// The 25, 50, 75, 90, 95, 99 and 99.9 % points of SURGE's file sizes
    /// (lognormal body μ = 9.357, σ = 1.318; 7 % Pareto tail, k = 133 KB,
    /// α = 1.1), rounded: each class holds a like share of the documents a
    /// web site serves.
    pub const CUTOFFS: [u64; 7] = [5 << 10, 13 << 10, 36 << 10, 130 << 10, 222 << 10, 803 << 10, 6 << 20];
    /// Most classes (`htb` classes 1:1 to 1:8 with the default base).
    pub const MAX_CLASSES: usize = 8;
    /// The default `SO_PRIORITY` of class 0: `1:1` for an `htb` qdisc with
    /// handle `1:`, which then classifies without a filter.
    pub const PRIORITY_BASE: u32 = 0x10001;
    /// The default starvation bound.
    pub const MAX_WAIT: Duration = Duration::from_secs(2);
    /// Unsent bytes kept in the kernel: two full-size segments' worth of a
    /// 64 KB window is enough to keep a fast link busy, small enough that a
    /// class change applies within a few packets.
    pub const UNSENT_LIMIT: u32 = 16 << 10;
    /// Bytes between looks at a response's class.
    pub const QUANTUM: u64 = 64 << 10;

    /// The size SRPT goes by for a response with `remaining` bytes to send
    /// that has been writing for `waited`: what it has left, or nothing
    /// once it has waited past `max_wait` (the bound on starvation), so it
    /// goes first.
    pub fn size(&self, remaining: u64, waited: Duration) -> u64 {
        if waited >= self.max_wait {
            0
        } else {
            remaining
        }
    }

    /// The class of a response with `remaining` bytes to send that has been
    /// writing for `waited`.
    pub fn class(&self, remaining: u64, waited: Duration) -> u8 {
        let size = self.size(remaining, waited);
        self.cutoffs.iter().take_while(|&&cutoff| size > cutoff).count() as u8
    }

    /// The `SO_PRIORITY` of `class`.
    pub fn priority(&self, class: u8) -> u32 {
        self.priority_base + u32::from(class)
    }
}

impl Default for Srpt {
    fn default() -> Srpt {
        Srpt {
            cutoffs: Srpt::CUTOFFS.to_vec(),
            max_wait: Srpt::MAX_WAIT,
            priority_base: Srpt::PRIORITY_BASE,
            unsent_limit: Srpt::UNSENT_LIMIT,
            quantum: Srpt::QUANTUM,
            group: false,
        }
    }
}

/// The document a response sends (the file's device and inode), for
/// same-document grouping: responses that name one are served back to back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Document {
    /// `st_dev`, or 0 for an embedded file.
    pub dev: u64,
    /// `st_ino`, or an embedded file's content hash.
    pub ino: u64,
}

/// A connection due a drive in a loop's turn, as [`order_turn`] sorts them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Due {
    /// Where its group goes: the fewest bytes any connection sending the
    /// same document has left (its own remaining bytes when ungrouped).
    lead: u64,
    document: Option<Document>,
    remaining: u64,
    /// The loop's name for the connection.
    pub token: u64,
}

impl Due {
    /// `remaining` as [`Srpt::size`] gives it; `document` what the response sends, if a file.
    pub fn new(remaining: u64, document: Option<Document>, token: u64) -> Due {
        Due { lead: remaining, document, remaining, token }
    }
}

/// Orders a loop's turn for SRPT: fewest bytes left first, ties by token,
/// each token once. With `group` (`--schedule srpt-group`, paper 004's
/// same-document grouping), the connections sending one document are
/// served back to back, where the one of them with the fewest bytes left
/// would be: the document's pages are read once and sent to each while
/// they are in memory.
pub fn order_turn(due: &mut Vec<Due>, group: bool) {
    if group {
        due.sort_unstable_by_key(|d| (d.document, d.remaining));
        let mut start = 0;
        while start < due.len() {
            let (document, lead) = (due[start].document, due[start].remaining);
            let end = start + due[start..].iter().take_while(|d| d.document == document).count();
            if document.is_some() {
                due[start..end].iter_mut().for_each(|d| d.lead = lead);
            }
            start = end;
        }
        due.sort_unstable();
    } else {
        due.sort_unstable_by_key(|d| (d.remaining, d.token));
    }
    due.dedup_by_key(|d| d.token);
}

/// Checks class cutoffs as `--srpt-classes` gives them: ascending, at most
/// [`Srpt::MAX_CLASSES`]` - 1`.
pub fn check_cutoffs(cutoffs: &[u64]) -> Result<(), String> {
    if cutoffs.len() >= Srpt::MAX_CLASSES {
        return Err(format!(
            "{} cutoffs make {} classes; at most {} (SO_PRIORITY base to base + 7)",
            cutoffs.len(),
            cutoffs.len() + 1,
            Srpt::MAX_CLASSES
        ));
    }
    if cutoffs.windows(2).any(|w| w[0] >= w[1]) || cutoffs.first() == Some(&0) {
        return Err("class cutoffs must be positive and ascending, e.g. 4KiB,64KiB,1MiB".into());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_cutoffs() {
        let srpt = Srpt { cutoffs: vec![1000, 10_000], ..Srpt::default() };
        let class = |remaining| srpt.class(remaining, Duration::ZERO);
        assert_eq!([class(0), class(1000), class(1001), class(10_000), class(10_001)], [0, 0, 1, 1, 2]);
        assert_eq!(class(u64::MAX), 2);
        assert_eq!(srpt.priority(0), 0x10001);
        assert_eq!(srpt.priority(2), 0x10003);
    }

    #[test]
    fn a_response_that_waited_too_long_goes_first() {
        let srpt = Srpt::default();
        assert_eq!(srpt.class(100 << 20, Duration::ZERO), 7);
        assert_eq!(srpt.class(100 << 20, Srpt::MAX_WAIT - Duration::from_millis(1)), 7);
        assert_eq!(srpt.class(100 << 20, Srpt::MAX_WAIT), 0);
    }

    #[test]
    fn default_cutoffs_make_eight_classes_in_order() {
        assert!(check_cutoffs(&Srpt::CUTOFFS).is_ok());
        let srpt = Srpt::default();
        let classes: Vec<u8> = [500, 8 << 10, 20 << 10, 100 << 10, 200 << 10, 500 << 10, 2 << 20, 50 << 20]
            .iter()
            .map(|&n| srpt.class(n, Duration::ZERO))
            .collect();
        assert_eq!(classes, [0, 1, 2, 3, 4, 5, 6, 7]);
    }

    fn tokens(due: &[Due]) -> Vec<u64> {
        due.iter().map(|d| d.token).collect()
    }

    #[test]
    fn a_turn_goes_fewest_bytes_first_each_connection_once() {
        let a = Some(Document { dev: 1, ino: 10 });
        let b = Some(Document { dev: 1, ino: 20 });
        // Token 3 is due twice: readable this turn, and yielded last turn.
        let turn = [Due::new(500, a, 3), Due::new(0, None, 7), Due::new(90_000, b, 1), Due::new(500, a, 3)];
        let mut due = turn.to_vec();
        order_turn(&mut due, false);
        assert_eq!(tokens(&due), [7, 3, 1]);
        // Equal remaining bytes: token order, whatever the documents.
        let mut due = vec![Due::new(500, b, 9), Due::new(500, a, 4), Due::new(500, None, 6)];
        order_turn(&mut due, false);
        assert_eq!(tokens(&due), [4, 6, 9]);
    }

    #[test]
    fn grouping_serves_one_documents_connections_back_to_back() {
        let big = Some(Document { dev: 1, ino: 10 });
        let small = Some(Document { dev: 1, ino: 20 });
        let other_dev = Some(Document { dev: 2, ino: 10 });
        let mut due = vec![
            Due::new(800_000, big, 1),
            Due::new(2_000, small, 2),
            Due::new(40_000, None, 3),
            Due::new(30_000, big, 4),
            Due::new(500_000, other_dev, 5),
            Due::new(0, None, 6),
            Due::new(2_000, small, 2),
            Due::new(120_000, big, 7),
        ];
        order_turn(&mut due, true);
        // `big`'s three go together where its 30,000-byte one would go (after
        // the reading connection 6, `small`'s 2 once, before 3's 40,000),
        // fewest left first among them; the same inode on another device is
        // another document.
        assert_eq!(tokens(&due), [6, 2, 4, 7, 1, 3, 5]);
        // Without grouping the same turn is plain SRPT.
        order_turn(&mut due, false);
        assert_eq!(tokens(&due), [6, 2, 4, 3, 7, 5, 1]);
    }

    #[test]
    fn grouping_leaves_responses_without_a_document_alone() {
        let mut due = vec![Due::new(300, None, 1), Due::new(200, None, 2), Due::new(100, None, 3)];
        order_turn(&mut due, true);
        assert_eq!(tokens(&due), [3, 2, 1]);
    }

    #[test]
    fn bad_cutoffs_are_refused() {
        assert!(check_cutoffs(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap_err().contains("at most 8"));
        assert!(check_cutoffs(&[10, 5]).unwrap_err().contains("ascending"));
        assert!(check_cutoffs(&[0, 5]).is_err());
        assert!(check_cutoffs(&[]).is_ok(), "one class: every response alike");
    }
}
