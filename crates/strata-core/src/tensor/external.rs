//! Tensors over memory that something other than an allocator owns (a memory-mapped file,
//! a buffer handed over by another library): the storage is built by its owner with
//! [`Storage::from_owner`](crate::storage::Storage::from_owner), and this checks that a
//! tensor's elements fit in it before viewing them.

use std::sync::Arc;

use crate::layout::{checked_numel, Layout};
use crate::storage::Storage;
use crate::{DType, Error, Result, Tensor};

impl Tensor {
    /// A contiguous tensor of `shape` and `dtype` viewing `storage` from its first byte.
    /// Nothing is copied: the tensor shares the storage (and keeps it, and so its owner,
    /// alive). It requires no grad and has no history.
    ///
    /// ```
    /// use std::ptr::NonNull;
    /// use std::sync::Arc;
    /// use strata_core::storage::Storage;
    /// use strata_core::{DType, Device, Tensor};
    /// let bytes: Box<[f32]> = vec![1.0f32, 2.0, 3.0, 4.0].into_boxed_slice();
    /// let ptr = NonNull::from(&bytes[0]).cast::<u8>();
    /// // SAFETY: the boxed slice is 16 bytes, aligned for f32, owned by the storage, and
    /// // nothing else touches it.
    /// let storage = unsafe { Storage::from_owner(ptr, 16, Device::Cpu, Box::new(bytes)) };
    /// let t = Tensor::from_storage(Arc::new(storage), &[2, 2], DType::F32)?;
    /// assert_eq!(t.to_vec::<f32>()?, vec![1.0, 2.0, 3.0, 4.0]);
    /// # Ok::<(), strata_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error::Argument`] when the elements would not fit in the storage, their count
    /// overflows, or the storage's address is not a multiple of the dtype's size (the
    /// kernels read elements in place, so they must be aligned; `Storage::from_owner`'s
    /// contract already asks for more, and this check keeps a broken owner from reaching
    /// a kernel).
    pub fn from_storage(storage: Arc<Storage>, shape: &[usize], dtype: DType) -> Result<Tensor> {
        const OP: &str = "Tensor::from_storage";
        let numel = checked_numel(shape).ok_or_else(|| {
            Error::argument(
                OP,
                format!("the element count of shape {shape:?} overflows"),
                None,
            )
        })?;
        let needed = numel.checked_mul(dtype.size()).ok_or_else(|| {
            Error::argument(OP, format!("{numel} elements of {dtype:?} overflow"), None)
        })?;
        if needed > storage.nbytes() {
            return Err(Error::argument(
                OP,
                format!(
                    "shape {shape:?} of {dtype:?} needs {needed} bytes but the storage holds {}",
                    storage.nbytes()
                ),
                Some("pass a shape whose elements fit in the storage"),
            ));
        }
        let addr = storage.data_ptr() as usize;
        if !addr.is_multiple_of(dtype.size()) {
            return Err(Error::argument(
                OP,
                format!(
                    "the storage starts at {addr:#x}, which is not aligned for {dtype:?} ({} bytes)",
                    dtype.size()
                ),
                Some("copy the bytes into an allocated tensor instead"),
            ));
        }
        Ok(Tensor::from_parts(
            storage,
            Layout::contiguous(shape, 0),
            dtype,
            None,
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::ptr::NonNull;
    use std::sync::Arc;

    use crate::storage::Storage;
    use crate::{DType, Device, Tensor};

    fn storage_of(words: Vec<u64>) -> Arc<Storage> {
        let words = words.into_boxed_slice();
        let nbytes = words.len() * 8;
        let ptr = NonNull::from(&words[0]).cast::<u8>();
        // SAFETY: `ptr` points to the `nbytes` bytes of the boxed slice (aligned to 8, the
        // largest element alignment), which the storage owns and nothing else touches.
        Arc::new(unsafe { Storage::from_owner(ptr, nbytes, Device::Cpu, Box::new(words)) })
    }

    #[test]
    fn views_the_owned_bytes_without_copying() {
        let s = storage_of(vec![0x3ff0_0000_0000_0000, 0x4000_0000_0000_0000]);
        let t = Tensor::from_storage(s.clone(), &[2], DType::F64).unwrap();
        assert_eq!(t.to_vec::<f64>().unwrap(), vec![1.0, 2.0]);
        assert_eq!(t.storage_id(), s.id());
        assert!(!t.requires_grad());
    }

    #[test]
    fn refuses_shapes_that_do_not_fit() {
        let s = storage_of(vec![0; 2]);
        let err = Tensor::from_storage(s.clone(), &[3], DType::F64).unwrap_err();
        assert!(err.to_string().contains("needs 24 bytes"), "{err}");
        assert!(Tensor::from_storage(s.clone(), &[usize::MAX, 2], DType::F32).is_err());
        assert!(Tensor::from_storage(s, &[16], DType::U8).is_ok());
    }
}
