//! The provided buffer ring a loop's multishot receives fill: the kernel
//! picks a free buffer for each arrival and names it in the completion; the
//! loop copies the bytes out and gives the buffer straight back, so the
//! ring is never short of buffers for long and a connection holds none.

use std::alloc::{self, Layout};
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU16, Ordering};

use io_uring::types::BufRingEntry;
use io_uring::IoUring;

/// The kernel reads the ring of buffer descriptors from a page-aligned address.
const PAGE: usize = 4096;

pub(super) struct BufRing {
    /// The ring of descriptors the kernel takes buffers from.
    entries: NonNull<BufRingEntry>,
    layout: Layout,
    count: u16,
    /// Our producer index; published with [`publish`](Self::publish).
    tail: u16,
    size: usize,
    /// The buffers themselves, `count` × `size`.
    memory: Box<[u8]>,
    group: u16,
}

impl BufRing {
    /// Registers `count` (a power of two) buffers of `size` bytes as group
    /// `group` of `ring`, all free.
    pub(super) fn register(ring: &IoUring, count: u16, size: usize, group: u16) -> io::Result<BufRing> {
        assert!(count.is_power_of_two(), "a buffer ring's size is a power of two");
        let layout = Layout::from_size_align(usize::from(count) * size_of::<BufRingEntry>(), PAGE)
            .map_err(io::Error::other)?;
        // SAFETY: the layout has a non-zero size (count ≥ 1).
        let entries = NonNull::new(unsafe { alloc::alloc_zeroed(layout) } as *mut BufRingEntry)
            .ok_or_else(|| io::Error::from(io::ErrorKind::OutOfMemory))?;
        let mut bufs = BufRing {
            entries,
            layout,
            count,
            tail: 0,
            size,
            memory: vec![0u8; usize::from(count) * size].into_boxed_slice(),
            group,
        };
        // SAFETY: `entries` is a page-aligned allocation of `count`
        // descriptors that lives as long as this value, whose Drop
        // unregisters it (and the loop drops it only after the ring).
        unsafe { ring.submitter().register_buf_ring_with_flags(entries.as_ptr() as u64, count, group, 0)? };
        for id in 0..count {
            bufs.give_back(id);
        }
        bufs.publish();
        Ok(bufs)
    }

    pub(super) fn group(&self) -> u16 {
        self.group
    }

    /// The first `len` bytes of buffer `id`, which a completion just named.
    pub(super) fn bytes(&self, id: u16, len: usize) -> &[u8] {
        let start = usize::from(id) * self.size;
        &self.memory[start..start + len.min(self.size)]
    }

    /// Makes buffer `id` free again (seen by the kernel after [`publish`](Self::publish)).
    pub(super) fn give_back(&mut self, id: u16) {
        let slot = usize::from(self.tail & (self.count - 1));
        let addr = self.memory[usize::from(id) * self.size..].as_ptr() as u64;
        // SAFETY: `slot` < `count`, inside the descriptor allocation. The
        // kernel reads only descriptors between its head and the published
        // tail, and this one is past the published tail (it held a buffer
        // the kernel already consumed, or none yet).
        let entry = unsafe { &mut *self.entries.as_ptr().add(slot) };
        entry.set_addr(addr);
        entry.set_len(self.size as u32);
        entry.set_bid(id);
        self.tail = self.tail.wrapping_add(1);
    }

    /// Shows the kernel every buffer given back so far.
    pub(super) fn publish(&self) {
        // SAFETY: the tail field lives in the first descriptor's reserved
        // bytes, inside our allocation, 2-byte aligned; the kernel reads it
        // concurrently, hence the atomic store (Release: the descriptors
        // written before are seen with it).
        unsafe {
            let tail = BufRingEntry::tail(self.entries.as_ptr()) as *const AtomicU16;
            (*tail).store(self.tail, Ordering::Release);
        }
    }

    /// Unregisters the group; the memory can go after this.
    pub(super) fn unregister(&self, ring: &IoUring) {
        let _ = ring.submitter().unregister_buf_ring(self.group);
    }
}

impl Drop for BufRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `register` with this layout. The owner
        // unregistered the group (or the ring is gone) before dropping it.
        unsafe { alloc::dealloc(self.entries.as_ptr() as *mut u8, self.layout) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Received bytes land in a buffer the kernel took from the ring, named
    /// by the completion; a buffer given back is used again.
    #[test]
    fn receives_land_in_provided_buffers_that_come_back() {
        use io_uring::{cqueue, opcode, types};
        use std::io::Write;
        use std::os::fd::AsRawFd;
        let Ok(mut ring) = IoUring::new(8) else {
            eprintln!("skipped: io_uring is not available here");
            return;
        };
        let mut bufs = BufRing::register(&ring, 2, 16, 7).unwrap();
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let server = l.accept().unwrap().0;
        let mut seen = Vec::new();
        for round in 0..4u8 {
            client.write_all(&[b'a' + round; 5]).unwrap();
            let recv =
                opcode::RecvMulti::new(types::Fd(server.as_raw_fd()), bufs.group()).build().user_data(1);
            // SAFETY: the receive names no memory but the registered
            // group's buffers, which live to the end of the test; the
            // multishot is cancelled, and its last completion reaped,
            // before the round ends.
            unsafe { ring.submission().push(&recv).unwrap() };
            ring.submit_and_wait(1).unwrap();
            let cqe = ring.completion().next().unwrap();
            assert_eq!(cqe.result(), 5);
            let id = cqueue::buffer_select(cqe.flags()).expect("a provided buffer");
            assert_eq!(bufs.bytes(id, 5), [b'a' + round; 5]);
            seen.push(id);
            bufs.give_back(id);
            bufs.publish();
            let cancel = opcode::AsyncCancel::new(1).build().user_data(2);
            // SAFETY: a cancel names no memory.
            unsafe { ring.submission().push(&cancel).unwrap() };
            ring.submit_and_wait(2).unwrap();
            ring.completion().for_each(drop);
        }
        // Two buffers, four receives: they were given back and reused.
        assert!(seen.iter().all(|&id| id < 2), "{seen:?}");
        bufs.unregister(&ring);
    }
}
