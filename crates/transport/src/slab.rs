//! Values in reusable slots, named by tokens that go stale when their slot
//! is reused: an event or a late answer for something closed never reaches
//! the slot's next occupant. Event loops keep their connections here.

/// The top bit of a token is never set by a slab: callers may mark tokens
/// with it (a CGI pipe registered under its connection's token).
pub const FLAG: u64 = 1 << 63;
const KIND_SHIFT: u32 = 60;
/// Generations have 28 bits: the bits between the kind and the slot.
const GENERATION_MASK: u32 = (1 << 28) - 1;
/// Slot numbers above this are left to the caller's own fixed tokens
/// (a listener, a waker), which therefore never collide with a slot's.
pub const MAX_SLOTS: u32 = u32::MAX - 16;

/// A token's layout: `FLAG | kind << 60 | generation << 32 | slot`.
#[derive(Debug)]
pub struct Slab<T> {
    kind: u64,
    slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
    live: usize,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab::new(0)
    }
}

impl<T> Slab<T> {
    /// An empty slab whose tokens carry `kind` (0..=7), so that one loop
    /// can tell apart the tokens of several slabs.
    pub fn new(kind: u8) -> Slab<T> {
        assert!(kind < 8, "a slab's kind has 3 bits");
        Slab { kind: u64::from(kind), slots: Vec::new(), free: Vec::new(), live: 0 }
    }

    /// The kind a token was issued with.
    pub fn kind_of(token: u64) -> u8 {
        ((token & !FLAG) >> KIND_SHIFT) as u8
    }

    /// Values held.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// Stores `value`; `None` (and `value` dropped) when every slot is taken.
    pub fn insert(&mut self, value: T) -> Option<u64> {
        self.insert_with(|_| value)
    }

    /// Stores what `make` builds from the token it will have (a value that
    /// registers itself somewhere under its own token).
    pub fn insert_with(&mut self, make: impl FnOnce(u64) -> T) -> Option<u64> {
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = u32::try_from(self.slots.len()).ok().filter(|&s| s < MAX_SLOTS)?;
                self.slots.push((0, None));
                slot
            }
        };
        let token = self.token(slot);
        self.slots[slot as usize].1 = Some(make(token));
        self.live += 1;
        Some(token)
    }

    fn token(&self, slot: u32) -> u64 {
        self.kind << KIND_SHIFT | u64::from(self.slots[slot as usize].0) << 32 | u64::from(slot)
    }

    /// Whether `token` is current: its slot holds the value it was issued for.
    fn current(&self, token: u64, generation: u32) -> bool {
        token & !FLAG == self.kind << KIND_SHIFT | u64::from(generation) << 32 | (token & u64::from(u32::MAX))
    }

    /// The value `token` names, unless it was removed since.
    pub fn get(&self, token: u64) -> Option<&T> {
        match self.slots.get(token as u32 as usize)? {
            (generation, Some(value)) if self.current(token, *generation) => Some(value),
            _ => None,
        }
    }

    /// [`get`](Self::get), mutably.
    pub fn get_mut(&mut self, token: u64) -> Option<&mut T> {
        let slot = token as u32 as usize;
        let generation = self.slots.get(slot)?.0;
        if !self.current(token, generation) {
            return None;
        }
        self.slots[slot].1.as_mut()
    }

    /// Takes the value out; `token` (and every copy of it) goes stale.
    pub fn remove(&mut self, token: u64) -> Option<T> {
        self.get(token)?;
        let slot = token as u32;
        let entry = &mut self.slots[slot as usize];
        entry.0 = entry.0.wrapping_add(1) & GENERATION_MASK;
        self.free.push(slot);
        self.live -= 1;
        entry.1.take()
    }

    /// The tokens of every value held (a copy: the caller may remove while it walks them).
    pub fn tokens(&self) -> Vec<u64> {
        (0..self.slots.len() as u32)
            .filter(|&s| self.slots[s as usize].1.is_some())
            .map(|s| self.token(s))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_removed_token_never_names_the_next_occupant() {
        let mut slab = Slab::new(0);
        let a = slab.insert("a").unwrap();
        assert_eq!(slab.get(a), Some(&"a"));
        assert_eq!(slab.remove(a), Some("a"));
        let b = slab.insert("b").unwrap();
        assert_eq!(a as u32, b as u32, "the slot is reused");
        assert_ne!(a, b);
        assert_eq!(slab.get(a), None);
        assert_eq!(slab.get_mut(a), None);
        assert_eq!(slab.remove(a), None);
        assert_eq!(slab.get(b), Some(&"b"));
        assert_eq!(slab.len(), 1);
    }

    #[test]
    fn kinds_and_the_flag_bit_keep_tokens_apart() {
        let mut clients = Slab::new(1);
        let mut backends = Slab::new(2);
        let c = clients.insert('c').unwrap();
        let b = backends.insert('b').unwrap();
        assert_eq!((Slab::<char>::kind_of(c), Slab::<char>::kind_of(b)), (1, 2));
        assert_eq!(c & !(7 << 60), b & !(7 << 60), "same slot and generation");
        assert_eq!(clients.get(b), None, "another slab's token");
        assert_eq!(backends.get_mut(c), None);
        assert_eq!(clients.get(c | FLAG), Some(&'c'), "the caller's flag is ignored");
        assert_eq!(Slab::<char>::kind_of(c | FLAG), 1);
    }

    #[test]
    fn generations_wrap_within_their_bits() {
        let mut slab = Slab::new(7);
        let mut token = slab.insert(0u32).unwrap();
        for i in 1..=(GENERATION_MASK as u64 + 2) {
            slab.remove(token).unwrap();
            token = slab.insert(i as u32).unwrap();
            assert_eq!(token & FLAG, 0);
            assert_eq!(Slab::<u32>::kind_of(token), 7);
        }
        assert_eq!(slab.get(token), Some(&(GENERATION_MASK + 2)));
    }

    #[test]
    fn insert_with_sees_its_own_token_and_tokens_lists_the_live() {
        let mut slab = Slab::new(3);
        let a = slab.insert_with(|token| token).unwrap();
        assert_eq!(slab.get(a), Some(&a));
        let b = slab.insert_with(|token| token).unwrap();
        slab.remove(a);
        assert_eq!(slab.tokens(), vec![b]);
    }
}
