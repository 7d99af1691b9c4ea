//! A weak handle to a tensor: it does not keep the tensor (or its memory) alive.

use std::sync::Weak;

use super::{Tensor, TensorImpl};

/// A handle that does not keep its tensor alive, as `std::sync::Weak` for an `Arc`. A hook
/// that needs the tensor it is registered on captures one of these: capturing the tensor
/// itself would make a cycle (tensor → hook → tensor) whose memory never returns.
///
/// ```
/// use strata_core::{DType, Tensor};
/// let t = Tensor::zeros(&[4], DType::F32)?;
/// let weak = t.downgrade_handle();
/// assert!(weak.upgrade().is_some());
/// drop(t);
/// assert!(weak.upgrade().is_none());
/// # Ok::<(), strata_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct WeakTensor(Weak<TensorImpl>);

impl WeakTensor {
    /// The tensor, if a handle to it is still alive.
    pub fn upgrade(&self) -> Option<Tensor> {
        self.0.upgrade().map(Tensor)
    }

    /// True while some handle keeps the tensor alive.
    pub fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }
}

impl Tensor {
    /// A handle that does not keep this tensor alive (see [`WeakTensor`]).
    pub fn downgrade_handle(&self) -> WeakTensor {
        WeakTensor(self.downgrade())
    }
}
