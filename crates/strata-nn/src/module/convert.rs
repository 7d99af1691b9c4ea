//! Moving and converting a module's parameters and buffers in place (PyTorch's
//! `module.to(device)`, `module.to(dtype)`): each tensor keeps its identity through
//! [`Tensor::set_data`], so an optimizer built before the conversion still holds the
//! module's parameters.
//!
//! `set_data` is `unsafe` (an op running on the tensor meanwhile could pair a layout with a
//! storage it does not fit), so these are `unsafe fn`s with the same contract; this file and
//! the state dict's memory mapping are the only places in strata-nn with `unsafe` code.

use strata_core::{DType, Device, Error, Result, Tensor};

use super::core::TensorSlot;
use super::ModuleCore;

/// Every slot (parameters, buffers, plain attributes) of the module and its descendants,
/// each tensor once.
fn slots(core: &ModuleCore) -> Vec<TensorSlot> {
    let mut out: Vec<TensorSlot> = Vec::new();
    core.visit(&mut |_, c| {
        let own = c.own_slots();
        for s in own {
            let t = s.get();
            if !out.iter().any(|o| o.get().is_same(&t)) {
                out.push(s);
            }
        }
    });
    out
}

/// Converts every tensor with `f` (which returns `None` to leave one as it is), then gives
/// each its new data. All conversions run before any tensor changes, so an error in one
/// (out of memory) changes nothing.
///
/// # Safety
/// As for [`Module::to_device`](super::Module::to_device).
unsafe fn convert(core: &ModuleCore, f: impl Fn(&Tensor) -> Result<Option<Tensor>>) -> Result<()> {
    let _no_grad = strata_core::autograd::GradModeGuard::no_grad();
    let mut planned = Vec::new();
    for slot in slots(core) {
        let t = slot.get();
        if let Some(new) = f(&t)? {
            let grad = match t.grad() {
                Some(g) => f(&g)?,
                None => None,
            };
            planned.push((slot, t, new.detach()?, grad));
        }
    }
    for (slot, t, new, grad) in planned {
        if (t.device() == Device::Meta) != (new.device() == Device::Meta) {
            // A tensor cannot take data across the meta boundary; as PyTorch does there,
            // the slot gets a new tensor (which an optimizer built before does not hold).
            let fresh = if t.requires_grad() {
                new.requires_grad_(true)?
            } else {
                new
            };
            fresh.mark_category(t.memory_category());
            slot.set(fresh);
            continue;
        }
        let category = t.memory_category();
        // SAFETY: the caller promises that no op uses the module's tensors meanwhile.
        unsafe { t.set_data(&new)? };
        // The new memory is counted as the old was (a parameter stays a parameter).
        t.mark_category(category);
        if let Some(g) = grad {
            t.set_grad(Some(g))?;
        }
    }
    Ok(())
}

/// Moves every parameter and buffer to `device`.
///
/// # Safety
/// As for [`Module::to_device`](super::Module::to_device).
pub(super) unsafe fn to_device(core: &ModuleCore, device: Device) -> Result<()> {
    // SAFETY: forwarded from the caller.
    unsafe {
        convert(core, |t| {
            (t.device() != device)
                .then(|| t.to_device(device))
                .transpose()
        })
    }
}

/// Converts every floating parameter and buffer to `dtype`.
///
/// # Safety
/// As for [`Module::to_device`](super::Module::to_device).
pub(super) unsafe fn to_dtype(core: &ModuleCore, dtype: DType) -> Result<()> {
    if !dtype.is_floating() {
        return Err(Error::argument(
            "Module::to_dtype",
            format!("modules convert to floating dtypes only, not {dtype:?}"),
            Some("convert single tensors with Tensor::to"),
        ));
    }
    // SAFETY: forwarded from the caller.
    unsafe {
        convert(core, |t| {
            (t.dtype().is_floating() && t.dtype() != dtype)
                .then(|| t.to(dtype))
                .transpose()
        })
    }
}
