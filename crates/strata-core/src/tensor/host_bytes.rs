//! The bytes of a contiguous CPU tensor, lent to code outside the op system that reads or
//! writes memory in place (a communication library's collectives): the storage is locked
//! for the call as an op would lock it, and a write counts as an in-place modification.

use crate::storage::{lock_storages, Access};
use crate::{Device, Error, Result, Tensor};

impl Tensor {
    /// Runs `f` on this tensor's elements as bytes, with its storage read-locked for the call.
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let t = Tensor::from_vec(vec![1u8, 2, 3], &[3])?;
    /// assert_eq!(t.with_host_bytes("sum_bytes", |b| b.iter().sum::<u8>())?, 6);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Unsupported`] when the tensor is not on the CPU, and [`Error::Argument`] when
    /// it is not contiguous (its elements are not one run of memory; `.contiguous()` makes a
    /// copy that is).
    pub fn with_host_bytes<R>(&self, op: &'static str, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.check_host_contiguous(op)?;
        let body = self.read_body();
        let len = self.nbytes();
        let guards = lock_storages(&[(&body.storage, Access::Read)]);
        let base = guards.read_ptr(&body.storage);
        if len == 0 {
            return Ok(f(&[]));
        }
        // SAFETY: the tensor is contiguous on the CPU, so its `len` bytes start
        // `offset * element_size` bytes into its storage and lie within it (layouts are
        // checked against their storage when made); the read lock keeps writers out for the
        // call, and the storage outlives `body`, which is held across it.
        let bytes = unsafe {
            std::slice::from_raw_parts(base.add(body.layout.offset() * self.element_size()), len)
        };
        Ok(f(bytes))
    }

    /// Runs `f` on this tensor's elements as bytes it may change, with its storage
    /// write-locked for the call; counts one in-place modification by `op` (so autograd sees
    /// a tensor that a graph saved being changed, as after any in-place op).
    ///
    /// ```
    /// use strata_core::Tensor;
    /// let t = Tensor::from_vec(vec![1u8, 2, 3], &[3])?;
    /// t.with_host_bytes_mut("double_bytes", |b| b.iter_mut().for_each(|x| *x *= 2))?;
    /// assert_eq!(t.to_vec::<u8>()?, vec![2, 4, 6]);
    /// assert_eq!(t.version(), 1);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As for [`Tensor::with_host_bytes`].
    pub fn with_host_bytes_mut<R>(
        &self,
        op: &'static str,
        f: impl FnOnce(&mut [u8]) -> R,
    ) -> Result<R> {
        self.check_host_contiguous(op)?;
        let out = {
            let body = self.read_body();
            let len = self.nbytes();
            let guards = lock_storages(&[(&body.storage, Access::Write)]);
            let base = guards.write_ptr(&body.storage);
            if len == 0 {
                f(&mut [])
            } else {
                // SAFETY: as in `with_host_bytes`, and the write lock keeps every other reader
                // and writer out for the call, so the slice is the only access.
                let bytes = unsafe {
                    std::slice::from_raw_parts_mut(
                        base.add(body.layout.offset() * self.element_size()),
                        len,
                    )
                };
                f(bytes)
            }
        };
        self.bump_version(op);
        Ok(out)
    }

    fn check_host_contiguous(&self, op: &'static str) -> Result<()> {
        if self.device() != Device::Cpu {
            return Err(Error::Unsupported {
                op,
                message: format!(
                    "only a CPU tensor's bytes can be lent out; this one is on {}. Hint: \
                     copy it with .to(Device::Cpu) first",
                    self.device()
                ),
            });
        }
        if !self.is_contiguous() {
            return Err(Error::argument(
                op,
                format!(
                    "the tensor is not contiguous (shape {:?}, strides {:?}), so its elements \
                     are not one run of memory",
                    self.shape().to_vec(),
                    self.stride()
                ),
                Some("call .contiguous() first and use the copy"),
            ));
        }
        Ok(())
    }
}
