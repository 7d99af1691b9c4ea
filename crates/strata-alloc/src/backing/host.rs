//! `HostBacking`: segments are anonymous `mmap`s of host memory.

use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use super::{meminfo_field, physical_memory, Backing, BackingError, EventId, StreamId};

/// Segments of 2 MiB and more are aligned to 2 MiB and advised to use transparent huge pages.
const HUGE_PAGE: usize = 2 << 20;

/// Host memory from anonymous private `mmap`s.
///
/// * Segments of 2 MiB and more are aligned to 2 MiB and get `MADV_HUGEPAGE`, so the kernel can
///   back them with transparent huge pages.
/// * "Reserved" memory on the host is mapped address space: its pages become resident the first
///   time they are touched and stay resident until the segment is unmapped. The allocator's
///   reserved bytes are therefore an upper bound of what it adds to the resident set.
/// * The kernel over-commits, so the backing keeps its own count of mapped bytes and refuses
///   (as a recoverable out-of-memory) to map more than its capacity: by default the machine's
///   physical memory.
/// * Expandable segments reserve address space with `PROT_NONE`, make pages readable and
///   writable on `map`, and replace them with fresh `PROT_NONE` pages on `unmap` (which returns
///   them to the system).
/// * There is one stream (0); every event is complete as soon as it is recorded.
#[derive(Debug)]
pub struct HostBacking {
    capacity: usize,
    /// True when the capacity is the machine's memory (then `mem_info` also reads
    /// `MemAvailable`).
    physical: bool,
    mapped: AtomicUsize,
    next_event: AtomicU64,
}

impl Default for HostBacking {
    fn default() -> Self {
        Self::new()
    }
}

impl HostBacking {
    /// A backing whose capacity is the machine's physical memory.
    pub fn new() -> Self {
        HostBacking {
            capacity: physical_memory().unwrap_or(usize::MAX / 2),
            physical: true,
            mapped: AtomicUsize::new(0),
            next_event: AtomicU64::new(0),
        }
    }

    /// A backing that maps at most `capacity` bytes at once (segments plus mapped pages of
    /// expandable segments), for tests and for running in a fixed budget.
    pub fn with_capacity(capacity: usize) -> Self {
        HostBacking {
            capacity,
            physical: false,
            mapped: AtomicUsize::new(0),
            next_event: AtomicU64::new(0),
        }
    }

    /// The most bytes this backing maps at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Bytes currently mapped (segments plus mapped expandable pages).
    pub fn mapped_bytes(&self) -> usize {
        self.mapped.load(Ordering::Relaxed)
    }

    fn charge(&self, size: usize) -> Result<(), BackingError> {
        self.mapped
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |m| {
                m.checked_add(size).filter(|&t| t <= self.capacity)
            })
            .map(|_| ())
            .map_err(|_| BackingError::OutOfMemory { requested: size })
    }

    fn refund(&self, size: usize) {
        self.mapped.fetch_sub(size, Ordering::AcqRel);
    }
}

fn page_size() -> usize {
    static PAGE: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as usize
        } else {
            4096
        }
    })
}

fn os_error(what: &str, err: io::Error, size: usize) -> BackingError {
    if err.raw_os_error() == Some(libc::ENOMEM) {
        BackingError::OutOfMemory { requested: size }
    } else {
        BackingError::Fatal(format!("{what} of {size} bytes failed: {err}"))
    }
}

/// Maps `size` bytes (a multiple of the page size) aligned to `align` (a multiple of the page
/// size), with protection `prot`.
fn map_aligned(size: usize, align: usize, prot: libc::c_int) -> Result<usize, BackingError> {
    let extra = if align > page_size() { align } else { 0 };
    let len = size
        .checked_add(extra)
        .ok_or(BackingError::OutOfMemory { requested: size })?;
    // SAFETY: an anonymous private mapping at an address of the kernel's choice touches no
    // existing memory.
    let p = unsafe {
        libc::mmap(
            ptr::null_mut(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(os_error("mmap", io::Error::last_os_error(), size));
    }
    let start = p as usize;
    let aligned = start.next_multiple_of(align.max(1));
    let head = aligned - start;
    let tail = len - head - size;
    // SAFETY: both trimmed ranges lie inside the mapping just made and nothing uses them.
    unsafe {
        if head > 0 {
            libc::munmap(start as *mut libc::c_void, head);
        }
        if tail > 0 {
            libc::munmap((aligned + size) as *mut libc::c_void, tail);
        }
    }
    Ok(aligned)
}

fn advise_huge(addr: usize, size: usize) {
    if size >= HUGE_PAGE {
        // SAFETY: the range is a mapping this backing owns; advice never changes its contents.
        // Failure (transparent huge pages disabled) is harmless.
        unsafe {
            libc::madvise(addr as *mut libc::c_void, size, libc::MADV_HUGEPAGE);
        }
    }
}

fn whole_pages(size: usize) -> usize {
    size.next_multiple_of(page_size())
}

impl Backing for HostBacking {
    fn device_name(&self) -> &str {
        "cpu"
    }

    fn addresses_are_memory(&self) -> bool {
        true
    }

    fn allocate_segment(&self, size: usize) -> Result<usize, BackingError> {
        if size == 0 {
            return Err(BackingError::Fatal("a segment cannot be empty".into()));
        }
        self.charge(size)?;
        let align = if size >= HUGE_PAGE {
            HUGE_PAGE
        } else {
            page_size()
        };
        match map_aligned(whole_pages(size), align, libc::PROT_READ | libc::PROT_WRITE) {
            Ok(addr) => {
                advise_huge(addr, size);
                Ok(addr)
            }
            Err(e) => {
                self.refund(size);
                Err(e)
            }
        }
    }

    unsafe fn free_segment(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: the caller guarantees this is a whole mapping from `allocate_segment`.
        let rc = unsafe { libc::munmap(addr as *mut libc::c_void, whole_pages(size)) };
        if rc != 0 {
            return Err(os_error("munmap", io::Error::last_os_error(), size));
        }
        self.refund(size);
        Ok(())
    }

    fn reserve(&self, size: usize) -> Result<usize, BackingError> {
        map_aligned(whole_pages(size), HUGE_PAGE, libc::PROT_NONE)
    }

    fn map(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        self.charge(size)?;
        // SAFETY: the range lies inside a PROT_NONE reservation made by `reserve`, which no one
        // can have pointers into yet.
        let rc = unsafe {
            libc::mprotect(
                addr as *mut libc::c_void,
                whole_pages(size),
                libc::PROT_READ | libc::PROT_WRITE,
            )
        };
        if rc != 0 {
            self.refund(size);
            return Err(os_error("mprotect", io::Error::last_os_error(), size));
        }
        advise_huge(addr, size);
        Ok(())
    }

    unsafe fn unmap(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // Replacing the pages with a fresh inaccessible mapping gives their memory back to the
        // system and keeps the address range reserved.
        // SAFETY: the caller guarantees the range is mapped, inside our reservation, and unused.
        let p = unsafe {
            libc::mmap(
                addr as *mut libc::c_void,
                whole_pages(size),
                libc::PROT_NONE,
                libc::MAP_FIXED | libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(os_error("unmap", io::Error::last_os_error(), size));
        }
        self.refund(size);
        Ok(())
    }

    unsafe fn release_reservation(&self, addr: usize, size: usize) -> Result<(), BackingError> {
        // SAFETY: the caller guarantees this is a whole reservation with nothing mapped in it.
        let rc = unsafe { libc::munmap(addr as *mut libc::c_void, whole_pages(size)) };
        if rc != 0 {
            return Err(os_error("munmap", io::Error::last_os_error(), size));
        }
        Ok(())
    }

    fn record_event(&self, _stream: StreamId) -> Result<EventId, BackingError> {
        Ok(EventId(self.next_event.fetch_add(1, Ordering::Relaxed)))
    }

    fn query_event(&self, _event: EventId) -> Result<bool, BackingError> {
        Ok(true)
    }

    fn synchronize_event(&self, _event: EventId) -> Result<(), BackingError> {
        Ok(())
    }

    fn release_event(&self, _event: EventId) {}

    fn synchronize_stream(&self, _stream: StreamId) -> Result<(), BackingError> {
        Ok(())
    }

    fn mem_info(&self) -> (usize, usize) {
        let mut free = self.capacity.saturating_sub(self.mapped_bytes());
        if self.physical {
            if let Some(avail) = meminfo_field("MemAvailable:") {
                free = free.min(avail);
            }
        }
        (free, self.capacity)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segments_are_writable_aligned_and_counted() {
        let b = HostBacking::with_capacity(8 << 20);
        let a = b.allocate_segment(4 << 20).unwrap();
        assert_eq!(a % HUGE_PAGE, 0);
        assert_eq!(b.mapped_bytes(), 4 << 20);
        // SAFETY: the segment is 4 MiB of fresh writable memory.
        unsafe {
            let p = a as *mut u8;
            p.write(7);
            p.add((4 << 20) - 1).write(9);
            assert_eq!(p.read(), 7);
        }
        let small = b.allocate_segment(512).unwrap();
        assert_eq!(small % 512, 0);
        assert!(matches!(
            b.allocate_segment(5 << 20),
            Err(BackingError::OutOfMemory { .. })
        ));
        // SAFETY: `a` and `small` are the addresses and sizes of the two `allocate_segment`
        // calls above, and the pointer written through earlier is not used again.
        unsafe {
            b.free_segment(a, 4 << 20).unwrap();
            b.free_segment(small, 512).unwrap();
        }
        assert_eq!(b.mapped_bytes(), 0);
        assert_eq!(b.mem_info(), (8 << 20, 8 << 20));
    }

    #[test]
    fn reserve_map_unmap() {
        let b = HostBacking::with_capacity(4 << 20);
        let r = b.reserve(64 << 20).unwrap();
        assert_eq!(r % HUGE_PAGE, 0);
        assert_eq!(b.mapped_bytes(), 0);
        b.map(r + (2 << 20), 2 << 20).unwrap();
        // SAFETY: the page was just mapped read-write.
        unsafe {
            let p = (r + (2 << 20)) as *mut u8;
            p.write(1);
            assert_eq!(p.read(), 1);
        }
        assert!(b.map(r + (4 << 20), 4 << 20).is_err());
        // SAFETY: the range unmapped is exactly the one mapped above, inside the reservation
        // released next, which is exactly the one `reserve` returned; the pointer written
        // through earlier is not used again.
        unsafe {
            b.unmap(r + (2 << 20), 2 << 20).unwrap();
            b.release_reservation(r, 64 << 20).unwrap();
        }
        assert_eq!(b.mapped_bytes(), 0);
    }

    #[test]
    fn host_events_are_always_complete() {
        let b = HostBacking::new();
        let e = b.record_event(StreamId::DEFAULT).unwrap();
        assert!(b.query_event(e).unwrap());
        b.synchronize_event(e).unwrap();
        b.release_event(e);
        let (free, total) = b.mem_info();
        assert!(free <= total && total > 0);
    }
}
