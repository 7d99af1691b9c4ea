//! The convolution's column kernels ([`crate::backend::Backend::im2col`] and
//! [`crate::backend::Backend::col2im_add`]) reached from tensors: an image `[b, C, H, W]`
//! and its columns `[b, C, kh, kw, OH, OW]`, each of any strides, the written one the
//! caller's own buffer (made by its op and not yet handed out). Nothing here allocates, so
//! a backend that declines (the caller then composes the same result from strided copies
//! and adds) allocates exactly as one that runs them.

use crate::backend::args::ColumnsArgs;
use crate::backend::for_device;
use crate::backend::kernel::ConvWindows;
use crate::storage::{lock_storages, Access};
use crate::{Error, Result, Tensor};

/// Writes every entry of `cols` from `image`, zero where a window reads padding. False
/// (nothing written) where the backend has no such kernel or `cols` overlaps itself.
pub(crate) fn im2col(image: &Tensor, cols: &Tensor, windows: &ConvWindows) -> Result<bool> {
    run(image, cols, windows, Way::Gather)
}

/// Adds every entry of `cols` onto the position of `image` it was read from, offset by
/// offset. False (nothing written) where the backend has no such kernel or `image`
/// overlaps itself.
pub(crate) fn col2im_add(cols: &Tensor, image: &Tensor, windows: &ConvWindows) -> Result<bool> {
    run(image, cols, windows, Way::AddBack)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Way {
    Gather,
    AddBack,
}

fn run(image: &Tensor, cols: &Tensor, windows: &ConvWindows, way: Way) -> Result<bool> {
    let (ishape, cshape) = (image.shape(), cols.shape());
    let (b, c) = match (ishape.as_slice(), cshape.as_slice()) {
        ([b, c, h, w], [b2, c2, kh, kw, oh, ow])
            if (b, c) == (b2, c2)
                && (*h, *w) == (windows.h, windows.w)
                && (*kh, *kw, *oh, *ow) == (windows.kh, windows.kw, windows.oh, windows.ow) =>
        {
            (*b, *c)
        }
        _ => {
            return Err(Error::shape(
                "conv2d",
                format!("the column matrices {cshape:?} do not fit the image {ishape:?}"),
                vec![ishape.to_vec(), cshape.to_vec()],
            ))
        }
    };
    if image.dtype() != cols.dtype() || image.device() != cols.device() {
        return Err(Error::dtype(
            "conv2d",
            "the column matrices and the image differ in dtype or device",
            None,
        ));
    }
    let written = if way == Way::Gather { cols } else { image };
    if !written.body().layout.is_non_overlapping_and_dense() {
        return Ok(false);
    }
    if cols.numel() == 0 {
        return Ok(true);
    }
    let (ib, cb) = (image.body(), cols.body());
    if image.numel() == 0 || std::ptr::eq(&*ib.storage, &*cb.storage) {
        return Ok(false);
    }
    let access = |t: Way| {
        if way == t {
            Access::Write
        } else {
            Access::Read
        }
    };
    let guards = lock_storages(&[
        (&*ib.storage, access(Way::AddBack)),
        (&*cb.storage, access(Way::Gather)),
    ]);
    let esize = image.dtype().size();
    let at = |body: &crate::tensor::Body, write: bool| {
        let base = if write {
            guards.write_ptr(&body.storage)
        } else {
            guards.read_ptr(&body.storage).cast_mut()
        };
        base.wrapping_add(body.layout.offset() * esize)
    };
    let strides = |body: &crate::tensor::Body, out: &mut [usize]| {
        out.copy_from_slice(body.layout.strides());
    };
    let mut image_strides = [0; 4];
    let mut col_strides = [0; 6];
    strides(&ib, &mut image_strides);
    strides(&cb, &mut col_strides);
    let args = ColumnsArgs {
        dtype: image.dtype(),
        image: at(&ib, way == Way::AddBack),
        image_strides,
        cols: at(&cb, way == Way::Gather),
        col_strides,
        samples: b,
        channels: c,
        windows: *windows,
    };
    let backend = for_device(image.device())?;
    // SAFETY: both operands' shapes and strides are their own layouts (checked against the
    // windows above); the written one is non-overlapping and dense and is the caller's
    // buffer, apart from the other (a fresh column buffer, or a fresh gradient); every
    // storage is locked until `guards` drops.
    let done = unsafe {
        match way {
            Way::Gather => backend.im2col(&args),
            Way::AddBack => backend.col2im_add(&args),
        }
    };
    drop(guards);
    Ok(done)
}
