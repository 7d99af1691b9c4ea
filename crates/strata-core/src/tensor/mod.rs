//! `Tensor`: a cheap, shareable handle to a strided view of a storage.
//!
//! Rust's `Clone` on a `Tensor` copies the *handle*: both handles are the same tensor, as two
//! Python names for one tensor are. PyTorch's data-copying `clone()` is
//! [`Tensor::deep_clone`].

mod arange;
mod create;
mod display;
mod external;
mod factory;
pub(crate) mod grad_meta;
pub(crate) mod graph;
pub(crate) mod graph_usage;
mod host_bytes;
mod multinomial;
mod read;
mod resize;
mod set_data;
mod spare;
mod view_events;
mod weak;

use std::sync::{Arc, RwLock, RwLockReadGuard};

use crate::layout::{Dims, Layout};
use crate::storage::{lock_storages, Access, Storage, StorageGuards};
use crate::{DType, Device};
use grad_meta::AutogradMeta;
use strata_alloc::Category;

pub use arange::ArangeRange;
pub(crate) use create::alloc_for;
pub use factory::Factory;
pub(crate) use read::{index_elements, read_elements};
use set_data::{AtomicDType, AtomicDevice};
pub(crate) use view_events::view_observer;
pub use view_events::{set_view_observer, ViewObserver};
pub use weak::WeakTensor;

/// How a view was made, needed by autograd to treat in-place writes through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViewCreation {
    /// An ordinary view.
    Plain,
    /// One of several outputs of one op (`split`, `chunk`, `unbind`): autograd refuses
    /// in-place writes to it.
    MultiOutput,
    /// Made under `no_grad`: autograd refuses in-place writes to it with grad mode on.
    NoGrad,
    /// Made in inference mode: autograd refuses in-place writes to it outside.
    InferenceMode,
}

/// Where a view came from: its base (the tensor that owns the memory, never itself a view)
/// and the op that made it.
#[derive(Debug, Clone)]
pub struct ViewInfo {
    /// The root tensor this view aliases.
    pub base: Tensor,
    /// The op that made the view (`"transpose"`, `"narrow"`, ...).
    pub op: &'static str,
    /// How it was made.
    pub creation: ViewCreation,
}

/// The storage and layout of a tensor at one moment.
#[derive(Debug, Clone)]
pub(crate) struct Body {
    pub storage: Arc<Storage>,
    pub layout: Layout,
}

/// Locks the storages of `reads` for reading and those of `writes` for writing, as one op
/// (see [`lock_storages`]).
pub(crate) fn lock_bodies<'a>(reads: &'a [Body], writes: &'a [Body]) -> StorageGuards<'a> {
    let locks: Vec<_> = reads
        .iter()
        .map(|b| (&*b.storage, Access::Read))
        .chain(writes.iter().map(|b| (&*b.storage, Access::Write)))
        .collect();
    lock_storages(&locks)
}

#[derive(Debug)]
pub(crate) struct TensorImpl {
    // Storage and layout change when an `out=` op resizes its output, and with the dtype
    // when `set_data` gives the tensor other data (under the body's write lock).
    body: RwLock<Body>,
    dtype: AtomicDType,
    /// The storage's device, readable without the body lock.
    device: AtomicDevice,
    /// A version counter of this tensor's own, for the one tensor that has one apart from its
    /// storage: a `detach()` of an inference tensor made outside inference mode (see
    /// [`Tensor::detached_inference`]).
    own_version: Option<std::sync::atomic::AtomicU32>,
    view: Option<ViewInfo>,
    /// Views of this tensor still alive (counted on bases only): with the handle count it
    /// tells whether only views keep the memory alive.
    live_views: std::sync::atomic::AtomicUsize,
    autograd: AutogradMeta,
}

impl TensorImpl {
    /// An empty tensor object over an empty storage, which stands in for a thread's spare in
    /// the handle that gave it up (see [`spare`]).
    fn stand_in() -> TensorImpl {
        TensorImpl {
            body: RwLock::new(Body {
                storage: Arc::new(Storage::stand_in()),
                layout: Layout::default(),
            }),
            dtype: AtomicDType::new(DType::U8),
            device: AtomicDevice::new(Device::Cpu),
            own_version: None,
            view: None,
            live_views: std::sync::atomic::AtomicUsize::new(0),
            autograd: AutogradMeta::default(),
        }
    }

    /// No view, no version of its own and no autograd state: a tensor whose object can be
    /// kept as a thread's spare once its last handle drops, with nothing to undo but its
    /// storage.
    fn is_plain(&self) -> bool {
        self.view.is_none() && self.own_version.is_none() && !self.autograd.has_state()
    }
}

impl Drop for Tensor {
    /// When this is the last handle to a plain tensor (no view, no autograd state), keeps its
    /// heap objects for the thread's next op to refill (`tensor/spare.rs`); its memory goes
    /// back to the allocator here, as it would otherwise.
    fn drop(&mut self) {
        spare::keep(&mut self.0);
    }
}

impl Drop for TensorImpl {
    fn drop(&mut self) {
        if let Some(v) = &self.view {
            v.base
                .0
                .live_views
                .fetch_sub(1, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// A tensor: a handle (`Arc`) to a strided view onto shared storage.
///
/// `Send + Sync`; every op takes `&self`. Memory is returned to its allocator when the last
/// handle to the last view of a storage drops.
///
/// ```
/// use strata_core::{Tensor, DType};
/// let x = Tensor::arange(6, DType::F32)?.view(&[2, 3])?;
/// let t = x.t()?;                       // a view: no copy
/// assert!(t.shares_storage(&x));
/// assert_eq!(t.stride(), vec![1, 3]);
/// t.add_scalar_(1.0)?;                  // writes through the view
/// assert_eq!(x.to_vec::<f32>()?, vec![1., 2., 3., 4., 5., 6.]);
/// assert_eq!(x.version(), 1);           // the version counter is shared by all views
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct Tensor(Arc<TensorImpl>);

impl Tensor {
    pub(crate) fn from_parts(
        storage: Arc<Storage>,
        layout: Layout,
        dtype: DType,
        view: Option<ViewInfo>,
    ) -> Tensor {
        Tensor::assemble(storage, layout, dtype, view, None)
    }

    /// A `detach()` of the inference tensor whose body is given, made outside inference
    /// mode. As in PyTorch, it is still an inference tensor (it shares the memory, and
    /// `requires_grad_` refuses it) but it has a version counter of its own, starting at 0:
    /// in-place writes to it are allowed outside inference mode and count there; inside
    /// inference mode they do not count. Its views share the storage's (absent) counter, like
    /// any view of an inference tensor.
    pub(crate) fn detached_inference(
        storage: Arc<Storage>,
        layout: Layout,
        dtype: DType,
    ) -> Tensor {
        let own = std::sync::atomic::AtomicU32::new(0);
        Tensor::assemble(storage, layout, dtype, None, Some(own))
    }

    #[inline]
    fn assemble(
        storage: Arc<Storage>,
        layout: Layout,
        dtype: DType,
        view: Option<ViewInfo>,
        own_version: Option<std::sync::atomic::AtomicU32>,
    ) -> Tensor {
        let device = AtomicDevice::new(storage.device());
        if let Some(v) = &view {
            v.base
                .0
                .live_views
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        // The thread's spare tensor object, when it has one, saves a heap allocation.
        if let Some(mut spare) = spare::take_tensor() {
            if let Some(t) = Arc::get_mut(&mut spare) {
                // Field by field: the spare is plain (no view, version or autograd state),
                // so only the body and the flags need writing.
                t.body = RwLock::new(Body { storage, layout });
                t.dtype = AtomicDType::new(dtype);
                t.device = device;
                t.own_version = own_version;
                t.view = view;
                *t.live_views.get_mut() = 0;
                t.autograd.clear_requires_grad();
                return Tensor(spare);
            }
        }
        Tensor(Arc::new(TensorImpl {
            body: RwLock::new(Body { storage, layout }),
            dtype: AtomicDType::new(dtype),
            device,
            own_version,
            view,
            live_views: std::sync::atomic::AtomicUsize::new(0),
            autograd: AutogradMeta::default(),
        }))
    }

    /// Whether this tensor counts its writes apart from its storage (see
    /// [`Tensor::detached_inference`]).
    pub(crate) fn has_own_version(&self) -> bool {
        self.0.own_version.is_some()
    }

    pub(crate) fn autograd_meta(&self) -> &AutogradMeta {
        &self.0.autograd
    }

    /// A weak handle (for hooks that must not keep the tensor alive).
    pub(crate) fn downgrade(&self) -> std::sync::Weak<TensorImpl> {
        Arc::downgrade(&self.0)
    }

    pub(crate) fn upgrade(weak: &std::sync::Weak<TensorImpl>) -> Option<Tensor> {
        weak.upgrade().map(Tensor)
    }

    /// The body under its read lock (held until the guard drops: keep it short).
    pub(crate) fn read_body(&self) -> RwLockReadGuard<'_, Body> {
        // Body updates are single assignments; a poisoned lock still holds a consistent body.
        self.0.body.read().unwrap_or_else(|p| p.into_inner())
    }

    pub(crate) fn set_layout(&self, layout: Layout) {
        self.0
            .body
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .layout = layout;
    }

    /// Calls `f` with the storage and layout, holding the tensor's body lock only for the call
    /// (cheaper than [`Tensor::body`] when a few fields are all that is needed).
    pub(crate) fn with_body<R>(&self, f: impl FnOnce(&Body) -> R) -> R {
        f(&self.read_body())
    }

    /// A snapshot of storage and layout.
    pub(crate) fn body(&self) -> Body {
        self.read_body().clone()
    }

    /// The sizes of each dimension, in the small vector the layout holds them in (inline up
    /// to six dimensions, so asking for a shape does not allocate). It derefs to
    /// `&[usize]`; `.to_vec()` gives a `Vec`.
    pub fn shape(&self) -> Dims {
        Dims::from_slice(self.read_body().layout.sizes())
    }

    /// The strides of each dimension, in elements.
    pub fn stride(&self) -> Vec<usize> {
        self.read_body().layout.strides().to_vec()
    }

    /// Offset of the first element in the storage, in elements.
    pub fn storage_offset(&self) -> usize {
        self.read_body().layout.offset()
    }

    /// A copy of the full layout (sizes, strides, offset).
    pub fn layout(&self) -> Layout {
        self.read_body().layout.clone()
    }

    /// Number of elements.
    pub fn numel(&self) -> usize {
        self.read_body().layout.numel()
    }

    /// Number of dimensions.
    pub fn dim(&self) -> usize {
        self.read_body().layout.ndim()
    }

    /// Element type.
    pub fn dtype(&self) -> DType {
        self.0.dtype.load()
    }

    /// Device of the storage.
    pub fn device(&self) -> Device {
        self.0.device.load()
    }

    /// Whether `self` and `other` are on one device (compared without decoding either).
    #[inline]
    pub(crate) fn same_device(&self, other: &Tensor) -> bool {
        self.0.device.word() == other.0.device.word()
    }

    /// Bytes per element.
    pub fn element_size(&self) -> usize {
        self.dtype().size()
    }

    /// Bytes the elements of this view cover (`numel * element_size`), not the storage size.
    pub fn nbytes(&self) -> usize {
        self.numel() * self.element_size()
    }

    /// PyTorch's `is_contiguous()`.
    pub fn is_contiguous(&self) -> bool {
        self.read_body().layout.is_contiguous()
    }

    /// Address of the first element (for identity checks; reading through it is unsafe).
    pub fn data_ptr(&self) -> usize {
        let b = self.read_body();
        b.storage.data_ptr() as usize + b.layout.offset() * self.element_size()
    }

    /// A number identifying the storage: equal for tensors that share memory.
    pub fn storage_id(&self) -> u64 {
        self.read_body().storage.id()
    }

    /// Size of the whole storage in bytes.
    pub fn storage_nbytes(&self) -> usize {
        self.read_body().storage.nbytes()
    }

    /// Counts this tensor's memory (its whole storage, shared by every view) as `category`
    /// from now on: how parameters, optimizer state and input batches are marked. Without a
    /// mark, memory is a gradient while a `.grad` holds it, an activation while a live graph
    /// node saves it, and a temporary otherwise; see `memory::memory_stats_map`'s
    /// `category_bytes.*` keys.
    ///
    /// ```
    /// use strata_core::{memory, Category, DType, Device, Tensor};
    /// let w = Tensor::on(Device::Meta).zeros(&[256, 256], DType::F32)?;
    /// w.mark_category(Category::Parameter);
    /// assert_eq!(w.memory_category(), Category::Parameter);
    /// let stats = memory::memory_stats_map(Device::Meta)?;
    /// assert!(stats["category_bytes.parameter.current"] >= 256 * 256 * 4);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn mark_category(&self, category: Category) {
        self.read_body().storage.mark_category(category);
    }

    /// Drops this handle, which held its storage in `role`. When it was the storage's last
    /// holder the memory is freed still counted under that role (so a freed activation never
    /// passes through the temporaries); otherwise the storage gives the role up.
    pub(crate) fn release_role(self, role: crate::storage::Role) {
        let storage = self.read_body().storage.clone();
        drop(self);
        if Arc::strong_count(&storage) > 1 {
            storage.take_role(role, false);
        }
    }

    /// The category this tensor's memory is counted under (see [`Tensor::mark_category`]).
    pub fn memory_category(&self) -> Category {
        self.read_body().storage.category()
    }

    /// True when both tensors view the same storage.
    pub fn shares_storage(&self, other: &Tensor) -> bool {
        self.storage_id() == other.storage_id()
    }

    /// True when both handles are the very same tensor (not merely the same storage).
    pub fn is_same(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }

    /// The in-place version counter, shared by every view of the storage: it counts writes by
    /// in-place and `out=` ops.
    pub fn version(&self) -> u32 {
        if let Some(own) = &self.0.own_version {
            return own.load(std::sync::atomic::Ordering::Acquire);
        }
        self.read_body().storage.version()
    }

    /// Whether this tensor is a view of another, and of which.
    pub fn view_info(&self) -> Option<&ViewInfo> {
        self.0.view.as_ref()
    }

    /// The tensor this one is a view of (the root owner of the memory), if it is a view.
    pub fn base(&self) -> Option<&Tensor> {
        self.0.view.as_ref().map(|v| &v.base)
    }

    /// Number of handles to this tensor (not counting views).
    pub fn handle_count(&self) -> usize {
        Arc::strong_count(&self.0)
    }

    /// For a view: true when views of its base are all that keep the storage alive (no
    /// handle to the base remains, and no other tensor uses the storage), so copying the
    /// views that are still needed would free the storage. False for a tensor that is not a
    /// view.
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let big = Tensor::zeros(&[1000], DType::F32)?;
    /// let head = big.narrow(0, 0, 10)?;
    /// assert!(!head.storage_held_only_by_views()); // `big` is still there
    /// drop(big);
    /// assert!(head.storage_held_only_by_views()); // 40 bytes keep 4000 alive
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    pub fn storage_held_only_by_views(&self) -> bool {
        let Some(v) = &self.0.view else {
            return false;
        };
        let views = v
            .base
            .0
            .live_views
            .load(std::sync::atomic::Ordering::Acquire);
        let base_handles = Arc::strong_count(&v.base.0);
        // Every live view's body holds the storage, and so does the base's.
        let storage_holders = self.with_body(|b| Arc::strong_count(&b.storage));
        base_handles <= views && storage_holders <= views + 1
    }

    /// Counts one in-place write by `op`.
    pub(crate) fn bump_version(&self, op: &'static str) {
        if let Some(own) = &self.0.own_version {
            if !crate::mode::is_inference_mode_enabled() {
                own.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                self.read_body().storage.note_write(op);
            }
            return;
        }
        self.read_body().storage.bump_version(op);
    }

    /// The op behind the last in-place write to this tensor's memory ("" before any).
    pub(crate) fn last_write(&self) -> &'static str {
        self.read_body().storage.last_write()
    }

    /// Sets the version counter of an output an op has just allocated, and filled in parts
    /// through in-place ops, back to 0 before handing it out (see
    /// [`Storage::reset_fresh_version`]).
    pub(crate) fn reset_fresh_version(&self) {
        self.read_body().storage.reset_fresh_version();
    }
}
