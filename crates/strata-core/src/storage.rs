//! Storage: untyped bytes shared by every view of them, with the version counter and the lock
//! that makes concurrent ops sound.
//!
//! This is one of the few modules with `unsafe`: it hands out raw pointers to the bytes, and
//! only while the storage is locked by [`lock_storages`].

use std::any::Any;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use strata_alloc::{Block, Category, DeviceAllocator, HostEvent};

use crate::Device;

pub(crate) mod spare;

/// Something that owns a region of memory and releases it when dropped: an allocator block,
/// a memory-mapped file, a vector.
pub trait DataOwner: Send + Sync + 'static {}
impl<T: Send + Sync + 'static> DataOwner for T {}

/// A block from a device allocator, returned to that allocator when dropped.
#[derive(Debug)]
pub struct AllocatorBlock {
    allocator: Arc<dyn DeviceAllocator>,
    block: Option<Block>,
}

impl AllocatorBlock {
    /// Takes ownership of `block`, which `allocator` produced.
    pub fn new(allocator: Arc<dyn DeviceAllocator>, block: Block) -> Self {
        AllocatorBlock {
            allocator,
            block: Some(block),
        }
    }

    /// The allocator the block goes back to.
    pub fn allocator(&self) -> &Arc<dyn DeviceAllocator> {
        &self.allocator
    }
}

impl Drop for AllocatorBlock {
    fn drop(&mut self) {
        if let Some(block) = self.block.take() {
            // SAFETY: the block came from this allocator (constructor contract) and the
            // storage that owned it is being dropped, so nothing can use it any more.
            unsafe { self.allocator.deallocate(block) };
        }
    }
}

/// Untyped bytes on one device.
///
/// The bytes can be replaced by a larger block (an `out=` op resizing its output), which keeps
/// the storage's identity, as PyTorch's resizable storages do; the address and size are read
/// atomically and only change under the write lock.
pub struct Storage {
    id: u64,
    ptr: AtomicPtr<u8>,
    nbytes: AtomicUsize,
    device: Device,
    owner: Mutex<Owner>,
    version: AtomicU32,
    /// The op behind the last in-place write ("" before any): what a saved tensor modified
    /// since it was saved names.
    last_write: Mutex<&'static str>,
    inference: bool,
    lock: RwLock<()>,
    roles: Mutex<Roles>,
    /// Set while a non-blocking copy into these bytes may still be running (`pending` holds
    /// its event): one atomic load tells a lock there is nothing to wait for.
    has_pending: AtomicBool,
    pending: Mutex<Option<HostEvent>>,
}

/// What a storage's memory is used for, from which its [`Category`] follows: a marked
/// category sticks; otherwise it is a gradient while a leaf's `.grad` holds it, an
/// activation while a live graph node saves it, and a temporary otherwise.
#[derive(Debug, Default)]
struct Roles {
    marked: Option<Category>,
    gradient_of: u32,
    saved_by: u32,
    /// The category the allocator counts the block under now.
    counted: Category,
}

impl Roles {
    fn category(&self) -> Category {
        match self.marked {
            Some(c) => c,
            None if self.gradient_of > 0 => Category::Gradient,
            None if self.saved_by > 0 => Category::Activation,
            None => Category::Temporary,
        }
    }
}

/// A role a storage takes on and gives up (see [`Storage::take_role`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Role {
    /// Held as a leaf's `.grad`.
    Gradient,
    /// Saved by a graph node for backward.
    Saved,
}

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage")
            .field("id", &self.id)
            .field("nbytes", &self.nbytes)
            .field("device", &self.device)
            .field("version", &self.version())
            .finish()
    }
}

// SAFETY: the bytes behind `ptr` are owned by `owner` (Send + Sync) and every access to them
// goes through `lock_storages`, which takes the storage's read or write lock.
unsafe impl Send for Storage {}
// SAFETY: as above; shared references only read metadata or take the lock.
unsafe impl Sync for Storage {}

/// What releases a storage's bytes: an allocator block (the common case, kept inline so a new
/// storage costs one heap object, not two) or any other owner.
enum Owner {
    Block(AllocatorBlock),
    // Held only to be dropped with the storage.
    Other(#[allow(dead_code)] Box<dyn Any + Send + Sync>),
}

static NEXT_STORAGE_ID: AtomicU64 = AtomicU64::new(1);

impl Storage {
    /// Storage over memory owned by `owner`.
    ///
    /// # Safety
    /// `ptr` must point to `nbytes` bytes, aligned for any element type, that stay valid and
    /// are not accessed by anything else for as long as `owner` is alive.
    pub unsafe fn from_owner(
        ptr: NonNull<u8>,
        nbytes: usize,
        device: Device,
        owner: Box<dyn Any + Send + Sync>,
    ) -> Self {
        // SAFETY: forwarded from the caller.
        unsafe { Storage::with_owner(ptr, nbytes, device, Owner::Other(owner)) }
    }

    /// # Safety
    /// As for [`Storage::from_owner`].
    unsafe fn with_owner(ptr: NonNull<u8>, nbytes: usize, device: Device, owner: Owner) -> Self {
        Storage {
            id: NEXT_STORAGE_ID.fetch_add(1, Ordering::Relaxed),
            ptr: AtomicPtr::new(ptr.as_ptr()),
            nbytes: AtomicUsize::new(nbytes),
            device,
            owner: Mutex::new(owner),
            version: AtomicU32::new(0),
            last_write: Mutex::new(""),
            inference: crate::mode::is_inference_mode_enabled(),
            lock: RwLock::new(()),
            roles: Mutex::new(Roles::default()),
            has_pending: AtomicBool::new(false),
            pending: Mutex::new(None),
        }
    }

    /// Storage over an allocator block.
    pub fn from_block(allocator: Arc<dyn DeviceAllocator>, block: Block, device: Device) -> Self {
        let (ptr, nbytes) = (block.ptr(), block.size());
        // SAFETY: the block is `nbytes` bytes aligned to BLOCK_ALIGN, owned by the
        // AllocatorBlock until it is dropped together with this storage.
        unsafe {
            Storage::with_owner(
                ptr,
                nbytes,
                device,
                Owner::Block(AllocatorBlock::new(allocator, block)),
            )
        }
    }

    /// A storage of no bytes, owned by nothing: what the bodies of a thread's spare tensor
    /// objects hold while they wait to be reused (see `spare`).
    pub(crate) fn stand_in() -> Self {
        // SAFETY: zero bytes at a dangling, aligned address: there is nothing to access.
        unsafe {
            Storage::with_owner(
                NonNull::dangling(),
                0,
                Device::Cpu,
                Owner::Other(Box::new(())),
            )
        }
    }

    /// Returns the bytes to their allocator now, as dropping the storage would (the observer
    /// is told the same), and leaves this storage empty, to be [refilled](Storage::refill)
    /// instead of allocated anew. `&mut` proves that nothing else can reach the bytes. False,
    /// having done nothing, when they are not an allocator's block or a copy into them may
    /// still be running.
    #[inline]
    pub(crate) fn release_block(&mut self) -> bool {
        if *self.has_pending.get_mut() {
            return false;
        }
        let owner = self.owner.get_mut().unwrap_or_else(|p| p.into_inner());
        if !matches!(owner, Owner::Block(AllocatorBlock { block: Some(_), .. })) {
            return false;
        }
        self.report_free();
        let owner = self.owner.get_mut().unwrap_or_else(|p| p.into_inner());
        if let Owner::Block(AllocatorBlock { allocator, block }) = owner {
            if let Some(block) = block.take() {
                // SAFETY: the block came from this allocator (`AllocatorBlock::new`'s
                // contract), and `&mut self` means no handle, view or lock can reach it.
                unsafe { allocator.deallocate(block) };
            }
        }
        *self.ptr.get_mut() = std::ptr::null_mut();
        *self.nbytes.get_mut() = 0;
        true
    }

    /// Makes this storage, empty after [`Storage::release_block`], the storage of `block`
    /// (which `allocator` produced), with a new identity: the same as `Storage::from_block`
    /// without a new heap object.
    #[inline]
    pub(crate) fn refill(
        &mut self,
        allocator: &Arc<dyn DeviceAllocator>,
        block: Block,
        device: Device,
    ) {
        // Field by field: writing a whole new storage would first drop the emptied one.
        self.id = NEXT_STORAGE_ID.fetch_add(1, Ordering::Relaxed);
        *self.ptr.get_mut() = block.ptr().as_ptr();
        *self.nbytes.get_mut() = block.size();
        self.device = device;
        // The emptied owner still holds the allocator its last block came from: when that is
        // this block's too (the common case), the block goes in beside it.
        match self.owner.get_mut() {
            Ok(Owner::Block(AllocatorBlock {
                allocator: kept,
                block: slot @ None,
            })) if Arc::ptr_eq(kept, allocator) => *slot = Some(block),
            _ => {
                self.owner = Mutex::new(Owner::Block(AllocatorBlock::new(allocator.clone(), block)))
            }
        }
        *self.version.get_mut() = 0;
        self.last_write = Mutex::new("");
        self.inference = crate::mode::is_inference_mode_enabled();
        self.lock = RwLock::new(());
        self.roles = Mutex::new(Roles::default());
        *self.has_pending.get_mut() = false;
        self.pending = Mutex::new(None);
    }

    /// A unique identity; two tensors share memory exactly when their storage ids are equal.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Size in bytes.
    pub fn nbytes(&self) -> usize {
        self.nbytes.load(Ordering::Acquire)
    }

    /// The device the bytes live on.
    pub fn device(&self) -> Device {
        self.device
    }

    /// Address of the first byte.
    pub fn data_ptr(&self) -> *const u8 {
        self.ptr.load(Ordering::Acquire)
    }

    /// The allocator the bytes return to, when they came from one.
    pub fn allocator(&self) -> Option<Arc<dyn DeviceAllocator>> {
        let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner());
        match &*owner {
            Owner::Block(b) => Some(b.allocator().clone()),
            Owner::Other(_) => None,
        }
    }

    /// Base address of the bytes for writing without a lock, when `this` is the only handle to
    /// the storage (one an op has just allocated): nothing else can reach it, so nothing can
    /// race. `None` once it is shared.
    pub(crate) fn unshared_write_ptr(this: &mut Arc<Storage>) -> Option<*mut u8> {
        Arc::get_mut(this).map(|s| *s.ptr.get_mut())
    }

    /// `f` of the allocator block these bytes are and its allocator; `None` when the bytes
    /// are not an allocator's block.
    fn with_block<R>(&self, f: impl FnOnce(&Arc<dyn DeviceAllocator>, &Block) -> R) -> Option<R> {
        let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner());
        match &*owner {
            Owner::Block(AllocatorBlock {
                allocator,
                block: Some(block),
            }) => Some(f(allocator, block)),
            _ => None,
        }
    }

    /// Tells the allocator the bytes came from that `stream` uses them (see
    /// [`DeviceAllocator::record_stream`]); false when they are not an allocator's block or
    /// the allocator has no streams.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn record_stream(&self, stream: strata_alloc::StreamId) -> bool {
        self.with_block(|a, b| a.record_stream(b, stream))
            .unwrap_or(false)
    }

    /// Records `event` on the pinned block these bytes are (see
    /// [`DeviceAllocator::record_host_event`]): the block is not reused before it completes.
    /// False when the bytes are not a block of an allocator that keeps host events.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn record_host_event(&self, event: &HostEvent) -> bool {
        self.with_block(|a, b| a.record_host_event(b, event))
            .unwrap_or(false)
    }

    /// Marks the bytes as the destination of a non-blocking copy that completes with
    /// `event`: every later lock of the storage (every op, every read) waits for it first.
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub(crate) fn set_pending(&self, event: HostEvent) {
        *self.pending.lock().unwrap_or_else(|p| p.into_inner()) = Some(event);
        self.has_pending.store(true, Ordering::Release);
    }

    /// Waits for a non-blocking copy into these bytes, if one may still be running. The wait
    /// holds the event's lock, so a second thread locking the storage meanwhile waits too.
    /// A copy whose device failed leaves the bytes unwritten: its error is kept for the op
    /// that took the lock ([`crate::kernel_error`]), which returns it.
    #[inline]
    fn wait_pending(&self) {
        if self.has_pending.load(Ordering::Acquire) {
            self.wait_for_pending_copy();
        }
    }

    /// Waits for any pending copy into the bytes, then takes the read lock.
    #[inline]
    fn read_lock(&self) -> RwLockReadGuard<'_, ()> {
        self.wait_pending();
        // A poisoned lock guards `()`: there is no state to be inconsistent, so recover it.
        self.lock.read().unwrap_or_else(|p| p.into_inner())
    }

    /// [`Storage::wait_pending`]'s wait, once a copy may be pending.
    #[cold]
    fn wait_for_pending_copy(&self) {
        let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = pending.as_ref() {
            if let Err(why) = e.wait() {
                crate::kernel_error::fail(crate::Error::Unsupported {
                    op: "non_blocking copy",
                    message: format!(
                        "the copy into this tensor failed on the device, so its values were \
                         never written: {why}"
                    ),
                });
            }
        }
        *pending = None;
        self.has_pending.store(false, Ordering::Release);
    }

    /// The in-place version counter shared by every view of this storage.
    pub fn version(&self) -> u32 {
        self.version.load(Ordering::Acquire)
    }

    /// Records one in-place modification by `op` (inference storages have no counter: it
    /// stays 0).
    pub fn bump_version(&self, op: &'static str) {
        if !self.inference {
            self.version.fetch_add(1, Ordering::AcqRel);
            self.note_write(op);
        }
    }

    /// Records `op` as the last in-place writer, without counting a version.
    pub(crate) fn note_write(&self, op: &'static str) {
        if let Ok(mut w) = self.last_write.lock() {
            *w = op;
        }
    }

    /// The op behind the last in-place write ("" before any).
    pub fn last_write(&self) -> &'static str {
        self.last_write.lock().map_or("", |w| *w)
    }

    /// Forgets the in-place writes an op made to an output it has just allocated and not yet
    /// handed out (filled in parts through in-place ops): nobody can have read its counter, and
    /// PyTorch's counterpart starts at 0.
    pub(crate) fn reset_fresh_version(&self) {
        self.version.store(0, Ordering::Release);
    }

    /// True for memory allocated inside inference mode (an inference tensor's storage).
    pub fn is_inference(&self) -> bool {
        self.inference
    }

    /// Counts this storage's memory as `category` from now on, whatever else it becomes
    /// (parameters, optimizer state and input batches are marked so by their owners).
    pub fn mark_category(&self, category: Category) {
        self.update_roles(|r| r.marked = Some(category));
    }

    /// The category this storage's memory is counted under.
    pub fn category(&self) -> Category {
        self.roles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .category()
    }

    /// Takes on (`gain`) or gives up one holder of `role`.
    pub(crate) fn take_role(&self, role: Role, gain: bool) {
        self.update_roles(|r| {
            let count = match role {
                Role::Gradient => &mut r.gradient_of,
                Role::Saved => &mut r.saved_by,
            };
            *count = if gain {
                count.saturating_add(1)
            } else {
                count.saturating_sub(1)
            };
        });
    }

    /// Applies `change` to the roles and tells the allocator when the category moves.
    fn update_roles(&self, change: impl FnOnce(&mut Roles)) {
        let mut roles = self.roles.lock().unwrap_or_else(|p| p.into_inner());
        change(&mut roles);
        let now = roles.category();
        if now != roles.counted {
            roles.counted = now;
            self.tell_allocator(now);
        }
    }

    fn tell_allocator(&self, category: Category) {
        self.with_block(|a, b| a.set_category(b, category));
    }
}

impl Storage {
    /// Tells the observer, if one is installed, that this storage's block goes back to its
    /// allocator: what its drop reports, and [`Storage::release_block`] before the block
    /// goes back early. Without an observer this costs one atomic load and nothing else.
    #[inline]
    fn report_free(&self) {
        if crate::observer::observing() {
            self.report_free_observed();
        }
    }

    /// [`Storage::report_free`] once an observer is installed.
    #[cold]
    #[inline(never)]
    fn report_free_observed(&self) {
        let owner = self.owner.lock().unwrap_or_else(|p| p.into_inner());
        self.observe_free(&owner);
    }

    /// Tells the observer, if one is installed, that `owner`'s block goes back to its
    /// allocator (one atomic load when none is).
    fn observe_free(&self, owner: &Owner) {
        let Some(o) = crate::observer::observer() else {
            return;
        };
        if let Owner::Block(AllocatorBlock {
            block: Some(block), ..
        }) = owner
        {
            o.memory(&crate::observer::AllocEvent {
                action: crate::observer::MemoryAction::Free,
                site: block.site(),
                bytes: block.size(),
                category: self.category(),
                device: self.device,
            });
        }
    }
}

impl Drop for Storage {
    fn drop(&mut self) {
        self.report_free();
    }
}

/// How an op uses a storage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Only read.
    Read,
    /// Written (and maybe read).
    Write,
}

enum Guard<'a> {
    Read(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Write(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

/// Storages locked inline by one op (more spill to the heap).
type Locked<T> = smallvec::SmallVec<[T; 4]>;

/// The locks an op holds on its storages, and the raw pointers it may use while it does.
pub struct StorageGuards<'a> {
    storages: Locked<(&'a Storage, Access)>,
    _guards: Locked<Guard<'a>>,
}

impl StorageGuards<'_> {
    /// Base address of `storage`'s bytes for reading. The storage must be one of the locked
    /// ones.
    pub fn read_ptr(&self, storage: &Storage) -> *const u8 {
        debug_assert!(self.storages.iter().any(|(s, _)| s.id == storage.id));
        storage.ptr.load(Ordering::Acquire)
    }

    /// Base address of `storage`'s bytes for writing. The storage must have been locked with
    /// [`Access::Write`].
    pub fn write_ptr(&self, storage: &Storage) -> *mut u8 {
        debug_assert!(self.is_write_locked(storage));
        storage.ptr.load(Ordering::Acquire)
    }

    fn is_write_locked(&self, storage: &Storage) -> bool {
        self.storages
            .iter()
            .any(|(s, a)| s.id == storage.id && *a == Access::Write)
    }

    /// Moves `storage`'s contents into `block` (a larger allocation): the old bytes are
    /// copied to the start of the block, the rest of the block is zeroed, and the old memory is
    /// released. The storage keeps its identity and version. It must be write-locked here.
    pub fn grow(
        &self,
        storage: &Storage,
        allocator: Arc<dyn DeviceAllocator>,
        block: Block,
    ) -> Result<(), Block> {
        if !self.is_write_locked(storage) || block.size() < storage.nbytes() {
            return Err(block);
        }
        let old_ptr = storage.ptr.load(Ordering::Acquire);
        let old_len = storage.nbytes();
        let new_ptr = block.ptr().as_ptr();
        let new_len = block.size();
        // A meta storage's addresses were never mapped: there are no bytes to move. A device
        // storage's bytes are not host memory: no op that runs on one resizes its output.
        if matches!(storage.device, Device::Cuda(_)) {
            return Err(block);
        }
        if storage.device != Device::Meta {
            // SAFETY: the old bytes are valid for `old_len` bytes (write lock held, so
            // nothing else touches them), the new block is valid for `new_len >= old_len`
            // bytes and is a distinct allocation, so the ranges do not overlap.
            unsafe {
                std::ptr::copy_nonoverlapping(old_ptr, new_ptr, old_len);
                std::ptr::write_bytes(new_ptr.add(old_len), 0, new_len - old_len);
            }
        }
        let new_owner = Owner::Block(AllocatorBlock::new(allocator, block));
        let old_owner = {
            let mut owner = storage.owner.lock().unwrap_or_else(|p| p.into_inner());
            storage.ptr.store(new_ptr, Ordering::Release);
            storage.nbytes.store(new_len, Ordering::Release);
            std::mem::replace(&mut *owner, new_owner)
        };
        storage.observe_free(&old_owner);
        drop(old_owner);
        // The new block starts as a temporary; it holds what the old one did.
        let counted = storage
            .roles
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .counted;
        if counted != Category::Temporary {
            storage.tell_allocator(counted);
        }
        Ok(())
    }
}

/// Locks every storage an op touches: each distinct storage once (so an op that reads and
/// writes the same storage does not deadlock on itself), with a write lock if any operand on it
/// is written, in increasing id order (so `a.copy_(b)` and `b.copy_(a)` on two threads cannot
/// wait on each other).
pub fn lock_storages<'a>(operands: &[(&'a Storage, Access)]) -> StorageGuards<'a> {
    let mut merged: Locked<(&'a Storage, Access)> = Locked::new();
    for &(s, a) in operands {
        match merged.iter_mut().find(|(m, _)| m.id == s.id) {
            Some(entry) => {
                if a == Access::Write {
                    entry.1 = Access::Write;
                }
            }
            None => merged.push((s, a)),
        }
    }
    merged.sort_unstable_by_key(|(s, _)| s.id);
    for (s, _) in &merged {
        s.wait_pending();
    }
    // A poisoned lock guards `()`: there is no state to be inconsistent, so recover it.
    let guards = merged
        .iter()
        .map(|(s, a)| match a {
            Access::Read => Guard::Read(s.lock.read().unwrap_or_else(|p| p.into_inner())),
            Access::Write => Guard::Write(s.lock.write().unwrap_or_else(|p| p.into_inner())),
        })
        .collect();
    StorageGuards {
        storages: merged,
        _guards: guards,
    }
}

/// The most storages [`lock_reads`] locks without [`lock_storages`]'s buffers.
const FEW: usize = 3;

/// Read locks on the storages an op only reads (the inputs of an op whose output is fresh),
/// from [`lock_reads`].
pub(crate) enum ReadGuards<'a> {
    /// Up to [`FEW`] storages, locked in a fixed array.
    Few(#[allow(dead_code)] [Option<RwLockReadGuard<'a, ()>>; FEW]),
    /// More, through [`lock_storages`].
    Many(#[allow(dead_code)] StorageGuards<'a>),
}

impl ReadGuards<'_> {
    /// Base address of `storage`'s bytes for reading. The storage must be one of the locked
    /// ones.
    pub fn read_ptr(&self, storage: &Storage) -> *const u8 {
        storage.ptr.load(Ordering::Acquire)
    }
}

/// Read-locks `storages` as [`lock_storages`] would (each distinct storage once, in
/// increasing id order, after any pending copy into it has finished), without building its
/// merged list and guard vector when there are at most [`FEW`]: a one-element `a + b` locks
/// its two inputs for a few instructions.
pub(crate) fn lock_reads<'a>(storages: &[&'a Storage]) -> ReadGuards<'a> {
    // One or two storages (a unary or binary op), ordered without the general sort.
    match *storages {
        [a] => return ReadGuards::Few([Some(a.read_lock()), None, None]),
        [a, b] => {
            if a.id == b.id {
                return ReadGuards::Few([Some(a.read_lock()), None, None]);
            }
            let (first, second) = if a.id < b.id { (a, b) } else { (b, a) };
            let first = first.read_lock();
            return ReadGuards::Few([Some(first), Some(second.read_lock()), None]);
        }
        _ => {}
    }
    if storages.len() > FEW {
        let all: Locked<_> = storages.iter().map(|&s| (s, Access::Read)).collect();
        return ReadGuards::Many(lock_storages(&all));
    }
    // Insertion into id order, skipping repeats.
    let mut order: [Option<&'a Storage>; FEW] = [None; FEW];
    let mut n = 0;
    for &s in storages {
        if order[..n].iter().flatten().any(|o| o.id == s.id) {
            continue;
        }
        let mut i = n;
        while let Some(prev) = order[..i].last().copied().flatten() {
            if prev.id < s.id {
                break;
            }
            order[i] = order[i - 1];
            i -= 1;
        }
        order[i] = Some(s);
        n += 1;
    }
    ReadGuards::Few(order.map(|s| s.map(Storage::read_lock)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use strata_alloc::{HostAllocator, Site};

    fn storage(alloc: &Arc<HostAllocator>, n: usize) -> Storage {
        let a: Arc<dyn DeviceAllocator> = alloc.clone();
        let block = a.allocate(n, &Site::unknown("test")).unwrap();
        Storage::from_block(a, block, Device::Cpu)
    }

    #[test]
    fn drop_returns_memory() {
        let alloc = Arc::new(HostAllocator::new());
        let s = storage(&alloc, 256);
        assert_eq!(alloc.memory_allocated(), 256);
        assert!(s.allocator().is_some());
        drop(s);
        assert_eq!(alloc.memory_allocated(), 0);
    }

    #[test]
    fn read_locks_hold_every_distinct_storage_once() {
        let alloc = Arc::new(HostAllocator::new());
        let s: Vec<Storage> = (0..5).map(|_| storage(&alloc, 64)).collect();
        for picks in [
            &[0usize][..],
            &[1, 0],
            &[2, 2],
            &[2, 0, 1],
            &[0, 0, 0],
            &[4, 3, 1, 0],
        ] {
            let chosen: Vec<&Storage> = picks.iter().map(|&i| &s[i]).collect();
            let guards = lock_reads(&chosen);
            for (i, st) in s.iter().enumerate() {
                // A held read lock refuses a writer; an unlocked storage takes one.
                let writable = st.lock.try_write().is_ok();
                assert_eq!(
                    writable,
                    !picks.contains(&i),
                    "picks {picks:?}, storage {i}"
                );
            }
            assert_eq!(
                guards.read_ptr(&s[picks[0]]),
                s[picks[0]].ptr.load(Ordering::Acquire)
            );
            drop(guards);
            assert!(s.iter().all(|st| st.lock.try_write().is_ok()));
        }
    }

    #[test]
    fn locking_the_same_storage_twice_does_not_deadlock() {
        let alloc = Arc::new(HostAllocator::new());
        let s = storage(&alloc, 64);
        let g = lock_storages(&[(&s, Access::Read), (&s, Access::Write)]);
        let p = g.write_ptr(&s);
        // SAFETY: 64 bytes are allocated and we hold the write lock.
        unsafe { p.write(7) };
        // SAFETY: 64 bytes are allocated and the lock is held.
        assert_eq!(unsafe { *g.read_ptr(&s) }, 7);
    }

    #[test]
    fn ids_are_unique_and_versions_count() {
        let alloc = Arc::new(HostAllocator::new());
        let (a, b) = (storage(&alloc, 8), storage(&alloc, 8));
        assert_ne!(a.id(), b.id());
        a.bump_version("add_");
        a.bump_version("mul_");
        assert_eq!(a.version(), 2);
        assert_eq!(b.version(), 0);
        assert_eq!((a.last_write(), b.last_write()), ("mul_", ""));
    }
}
