//! `set_data`: PyTorch's `t.data = other`. A tensor takes another tensor's memory, layout and
//! dtype and stays the same tensor, so every holder of a handle to it (a module, an
//! optimizer) sees the new data.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};

use crate::dtype::ALL_DTYPES;
use crate::{DType, Device, Error, Result, Tensor};

// `AtomicDType` stores a dtype as its index in `ALL_DTYPES`, which is its discriminant.
const _: () = {
    let mut i = 0;
    while i < ALL_DTYPES.len() {
        assert!(ALL_DTYPES[i] as usize == i);
        i += 1;
    }
};

/// A tensor's dtype, changeable through `&self` (by [`Tensor::set_data`] only, under the
/// tensor's body write lock, so a reader holding the body lock sees a dtype that matches the
/// storage and layout).
pub(crate) struct AtomicDType(AtomicU8);

impl AtomicDType {
    pub(crate) fn new(dtype: DType) -> Self {
        AtomicDType(AtomicU8::new(dtype as u8))
    }

    #[inline]
    pub(crate) fn load(&self) -> DType {
        // Only `new` and `store` write the index, so it is in range; the remainder tells the
        // compiler so (no bounds check on every op's dtype reads).
        ALL_DTYPES[self.0.load(Ordering::Acquire) as usize % ALL_DTYPES.len()]
    }

    fn store(&self, dtype: DType) {
        self.0.store(dtype as u8, Ordering::Release);
    }
}

/// A tensor's device, kept beside its storage so that asking for it takes no lock (every op
/// asks, to check its operands and find their backend). Changed with the storage, by
/// [`Tensor::set_data`] under the body's write lock. Encoded as one word: the CPU 0, the meta
/// device 1, CUDA device `i` as `2 + i`.
pub(crate) struct AtomicDevice(AtomicU64);

impl AtomicDevice {
    pub(crate) fn new(device: Device) -> Self {
        AtomicDevice(AtomicU64::new(Self::encode(device)))
    }

    fn encode(device: Device) -> u64 {
        match device {
            Device::Cpu => 0,
            Device::Meta => 1,
            Device::Cuda(i) => 2 + i as u64,
        }
    }

    #[inline]
    pub(crate) fn load(&self) -> Device {
        match self.0.load(Ordering::Acquire) {
            0 => Device::Cpu,
            1 => Device::Meta,
            n => Device::Cuda((n - 2) as usize),
        }
    }

    /// The encoded word: two tensors are on one device exactly when their words are equal.
    #[inline]
    pub(crate) fn word(&self) -> u64 {
        self.0.load(Ordering::Acquire)
    }

    fn store(&self, device: Device) {
        self.0.store(Self::encode(device), Ordering::Release);
    }
}

impl std::fmt::Debug for AtomicDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.load().fmt(f)
    }
}

impl std::fmt::Debug for AtomicDType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.load().fmt(f)
    }
}

impl Tensor {
    /// Gives this tensor `new`'s data: PyTorch's `self.data = new`. Afterwards this tensor
    /// views `new`'s storage with `new`'s layout and dtype (they share memory), and is still
    /// the same tensor: every handle to it sees the new data, and its autograd state is
    /// untouched: `requires_grad`, being a leaf (or its `grad_fn`), hooks, and `.grad`, which
    /// keeps its old shape and dtype as in PyTorch (clear it with
    /// [`zero_grad(true)`](Tensor::zero_grad) if they changed). `new` itself is unchanged and
    /// its own autograd state is not taken.
    ///
    /// This is how a module converts or loads parameters that an optimizer already holds:
    ///
    /// ```
    /// use strata_core::{DType, Tensor};
    /// let w = Tensor::ones(&[2, 2], DType::F32)?.requires_grad_(true)?;
    /// let held_by_optimizer = w.clone();
    /// let converted = w.to(DType::F64)?.detach()?;
    /// // SAFETY: no op is using `w` while its data is swapped.
    /// unsafe { w.set_data(&converted)? };
    /// assert_eq!(held_by_optimizer.dtype(), DType::F64);
    /// assert!(held_by_optimizer.requires_grad() && held_by_optimizer.is_leaf());
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    ///
    /// What stays with the old data: views made from this tensor before the call keep viewing
    /// the old storage (and keep it alive), and tensors autograd saved for backward keep the
    /// values they had when they were saved.
    ///
    /// The version counter belongs to the storage in strata, so afterwards this tensor counts
    /// writes with `new` and its views, and reports their version; the call itself counts as
    /// no write. (PyTorch keeps the tensor's own counter instead, which then no longer counts
    /// writes made through `new`.)
    ///
    /// # Errors
    ///
    /// Nothing changes when it refuses:
    /// - this tensor is a view ([`Error::Unsupported`]): a view's base would no longer be
    ///   what it aliases; call it on the base, or write into the view with
    ///   [`copy_`](Tensor::copy_). (PyTorch allows it and leaves the view's base stale.)
    /// - exactly one of the two is on the meta device ([`Error::Unsupported`]; PyTorch's
    ///   "incompatible tensor type"). Other device changes are allowed, as in PyTorch.
    /// - this tensor requires grad and `new`'s dtype is not floating ([`Error::Autograd`]).
    ///
    /// # Safety
    ///
    /// No op may be using this tensor while its data is swapped: not on another thread
    /// (through any handle), and not from a hook or observer that an op using it calls.
    /// Ops read a tensor's storage, layout and dtype at separate moments; a swap in between
    /// could pair a layout with a storage it does not fit, and a kernel would then read or
    /// write outside the storage. Likewise `new` may not be given other data by another
    /// `set_data` meanwhile. Calls made while no other thread can reach the tensor, or after
    /// the other threads' work on it has been joined, are sound.
    pub unsafe fn set_data(&self, new: &Tensor) -> Result<()> {
        const OP: &str = "set_data";
        if self.is_same(new) {
            return Ok(());
        }
        if self.view_info().is_some() {
            return Err(Error::Unsupported {
                op: OP,
                message: "a view cannot take other data (it would no longer alias its base); \
                          call set_data on the base tensor, or write into the view with copy_"
                    .into(),
            });
        }
        // The dtype is read under `new`'s body lock, so it matches the storage and layout.
        let (body, dtype) = new.with_body(|b| (b.clone(), new.dtype()));
        let (from, to) = (self.device(), body.storage.device());
        if (from == Device::Meta) != (to == Device::Meta) {
            return Err(Error::Unsupported {
                op: OP,
                message: format!(
                    "a tensor on {from} cannot take data on {to}: the meta device holds no \
                     data, so tensors on it and on other devices are not interchangeable"
                ),
            });
        }
        if self.requires_grad() && !dtype.is_floating() {
            return Err(Error::Autograd {
                message: format!(
                    "set_data: this tensor requires grad, so its data must be of a floating \
                     dtype, not {dtype}. Hint: convert the data with .to(DType::F32), or call \
                     requires_grad_(false) first"
                ),
            });
        }
        let old = {
            let mut guard = self.0.body.write().unwrap_or_else(|p| p.into_inner());
            self.0.dtype.store(dtype);
            self.0.device.store(to);
            std::mem::replace(&mut *guard, body)
        };
        // The old storage may be freed here, outside the lock.
        drop(old);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;
    use std::sync::Arc;

    use super::*;
    use crate::layout::Layout;
    use crate::storage::Storage;

    /// `t.set_data(new)` in a test, where nothing else uses `t`.
    fn set(t: &Tensor, new: &Tensor) -> Result<()> {
        // SAFETY: tests call this on one thread, with no op running on `t`.
        unsafe { t.set_data(new) }
    }

    #[test]
    fn the_atomic_dtype_round_trips_every_dtype() {
        for d in ALL_DTYPES {
            let a = AtomicDType::new(DType::Bool);
            a.store(d);
            assert_eq!(a.load(), d);
            assert_eq!(format!("{a:?}"), format!("{d:?}"));
        }
    }

    #[test]
    fn every_device_round_trips_through_the_atomic_device() {
        for d in [Device::Cpu, Device::Meta, Device::Cuda(0), Device::Cuda(7)] {
            let a = AtomicDevice::new(Device::Cpu);
            a.store(d);
            assert_eq!(a.load(), d);
            assert_eq!(format!("{a:?}"), format!("{d:?}"));
        }
    }

    #[test]
    fn the_tensor_takes_storage_layout_and_dtype_and_stays_itself() -> Result<()> {
        let p = Tensor::ones(&[2, 3], DType::F32)?.requires_grad_(true)?;
        let holder = p.clone();
        let new = Tensor::arange(6, DType::F64)?.view(&[3, 2])?.t()?;
        set(&p, &new)?;
        assert!(holder.is_same(&p));
        assert!(p.shares_storage(&new));
        assert_eq!(p.data_ptr(), new.data_ptr());
        assert_eq!((p.shape().to_vec(), p.stride()), (vec![2, 3], vec![1, 2]));
        assert_eq!(p.dtype(), DType::F64);
        assert_eq!(p.element_size(), 8);
        assert!(p.requires_grad() && p.is_leaf());
        // Not a view of `new`'s base: it owns its place in the graph.
        assert!(p.view_info().is_none());
        assert_eq!(holder.to_vec::<f64>()?, vec![0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
        Ok(())
    }

    #[test]
    fn grad_and_hooks_stay_with_the_tensor() -> Result<()> {
        let p = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
        p.mul(3.0)?.sum(None, false)?.backward()?;
        let grad = p.grad().expect("a gradient");
        set(&p, &Tensor::zeros(&[4], DType::F64)?)?;
        let kept = p.grad().expect("the gradient is kept");
        assert!(kept.is_same(&grad));
        assert_eq!((kept.shape().to_vec(), kept.dtype()), (vec![2], DType::F32));
        p.zero_grad(true)?;
        p.mul(2.0)?.sum(None, false)?.backward()?;
        let fresh = p.grad().expect("a new gradient");
        assert_eq!(
            (fresh.dtype(), fresh.to_vec::<f64>()?),
            (DType::F64, vec![2.0; 4])
        );
        Ok(())
    }

    #[test]
    fn the_version_is_that_of_the_new_storage_and_the_call_is_no_write() -> Result<()> {
        let p = Tensor::zeros(&[3], DType::F32)?;
        p.add_scalar_(1.0)?;
        let new = Tensor::zeros(&[3], DType::F32)?;
        for _ in 0..3 {
            new.add_scalar_(1.0)?;
        }
        set(&p, &new)?;
        assert_eq!((p.version(), new.version()), (3, 3));
        p.add_scalar_(1.0)?;
        assert_eq!(new.version(), 4);
        assert_eq!(new.to_vec::<f32>()?, vec![4.0; 3]);
        Ok(())
    }

    #[test]
    fn views_of_the_old_data_keep_the_old_storage() -> Result<()> {
        let p = Tensor::arange(4, DType::F32)?;
        let row = p.narrow(0, 1, 2)?;
        let old_storage = p.storage_id();
        set(&p, &Tensor::zeros(&[4], DType::F32)?)?;
        assert_eq!(row.storage_id(), old_storage);
        assert_ne!(p.storage_id(), old_storage);
        assert_eq!(row.to_vec::<f32>()?, vec![1.0, 2.0]);
        p.add_scalar_(5.0)?;
        assert_eq!(row.to_vec::<f32>()?, vec![1.0, 2.0]);
        Ok(())
    }

    #[test]
    fn tensors_saved_for_backward_keep_their_values() -> Result<()> {
        let x = Tensor::from_vec(vec![1.0f32, 2.0], &[2])?.requires_grad_(true)?;
        let w = Tensor::from_vec(vec![10.0f32, 20.0], &[2])?;
        let y = x.mul(&w)?.sum(None, false)?;
        set(&w, &Tensor::from_vec(vec![-1.0f32, -1.0], &[2])?)?;
        y.backward()?;
        assert_eq!(x.grad().unwrap().to_vec::<f32>()?, vec![10.0, 20.0]);
        Ok(())
    }

    #[test]
    fn a_non_leaf_keeps_its_grad_fn() -> Result<()> {
        let a = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
        let b = a.mul(2.0)?;
        set(&b, &Tensor::zeros(&[2], DType::F32)?)?;
        assert_eq!(b.grad_fn_name(), Some("MulBackward0"));
        assert!(b.requires_grad() && !b.is_leaf());
        assert_eq!(b.to_vec::<f32>()?, vec![0.0; 2]);
        Ok(())
    }

    #[test]
    fn backward_through_a_non_leaf_whose_shape_changed_is_an_error_not_a_panic() -> Result<()> {
        let a = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
        let b = a.mul(2.0)?;
        set(&b, &Tensor::zeros(&[3], DType::F64)?)?;
        // As in PyTorch, the recorded op refuses a gradient of the new shape.
        let r = std::panic::catch_unwind(|| b.sum(None, false)?.backward());
        let err = r.expect("no panic").unwrap_err();
        assert!(err.to_string().contains("shape [3]"), "{err}");
        Ok(())
    }

    #[test]
    fn refusals_change_nothing() -> Result<()> {
        // A view.
        let base = Tensor::ones(&[4], DType::F32)?;
        let view = base.narrow(0, 0, 2)?;
        match set(&view, &Tensor::zeros(&[3], DType::F32)?) {
            Err(Error::Unsupported { op: "set_data", .. }) => {}
            other => panic!("expected Unsupported, got {other:?}"),
        }
        assert_eq!(
            (view.shape().to_vec(), view.storage_id()),
            (vec![2], base.storage_id())
        );

        // Integer data for a tensor that requires grad.
        let p = Tensor::ones(&[2], DType::F32)?.requires_grad_(true)?;
        let err = set(&p, &Tensor::ones(&[2], DType::I64)?).unwrap_err();
        assert!(matches!(err, Error::Autograd { .. }), "{err}");
        assert!(err.to_string().contains("floating"), "{err}");
        assert_eq!(p.dtype(), DType::F32);
        // Without requires_grad any dtype goes.
        let q = Tensor::ones(&[2], DType::F32)?;
        set(&q, &Tensor::ones(&[2], DType::I64)?)?;
        assert_eq!(q.dtype(), DType::I64);
        Ok(())
    }

    /// A tensor whose storage claims to be on the meta device (nothing reads its bytes).
    fn on_meta() -> Tensor {
        let bytes: Box<[u64]> = vec![0u64; 2].into_boxed_slice();
        let ptr = NonNull::new(bytes.as_ptr() as *mut u8).unwrap();
        // SAFETY: the box owns 16 bytes, aligned for any element type, for as long as the
        // storage holds it.
        let storage = unsafe { Storage::from_owner(ptr, 16, Device::Meta, Box::new(bytes)) };
        Tensor::from_parts(
            Arc::new(storage),
            Layout::contiguous(&[4], 0),
            DType::F32,
            None,
        )
    }

    #[test]
    fn cpu_and_meta_tensors_do_not_exchange_data() -> Result<()> {
        let cpu = Tensor::ones(&[4], DType::F32)?;
        let meta = on_meta();
        for (a, b) in [(&cpu, &meta), (&meta, &cpu)] {
            let err = set(a, b).unwrap_err();
            assert!(matches!(err, Error::Unsupported { .. }), "{err}");
            assert!(err.to_string().contains("meta"), "{err}");
        }
        assert_eq!((cpu.device(), meta.device()), (Device::Cpu, Device::Meta));
        // Meta to meta is fine.
        let other = on_meta();
        set(&meta, &other)?;
        assert!(meta.shares_storage(&other));
        Ok(())
    }

    #[test]
    fn setting_a_tensor_to_itself_or_to_a_view_of_itself_works() -> Result<()> {
        let p = Tensor::arange(4, DType::F32)?;
        set(&p, &p)?;
        assert_eq!(p.numel(), 4);
        let middle = p.narrow(0, 1, 2)?;
        set(&p, &middle)?;
        assert_eq!((p.shape().to_vec(), p.storage_offset()), (vec![2], 1));
        assert_eq!(p.to_vec::<f32>()?, vec![1.0, 2.0]);
        Ok(())
    }
}
