//! The direct convolution ([`crate::backend::Backend::conv2d_direct`]) reached from tensors:
//! a stride-1, undilated, ungrouped convolution of a contiguous image, with no column
//! matrices, into the caller's own output (made by its op and not yet handed out). It
//! computes a forward convolution, or an input's gradient as the convolution of the output's
//! gradient with the weight flipped and its two channel dimensions swapped, and the weight's
//! gradient from the image and the output's gradient. Nothing here allocates.

use crate::backend::args::{ConvSizes, DirectConvArgs, DirectWeightGradArgs};
use crate::backend::for_device;
use crate::tensor::lock_bodies;
use crate::{Error, Result, Tensor};

/// Which convolution [`run`] computes from the weight `[O, C, kh, kw]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Direction {
    /// `[N, C, H, W]` → `[N, O, OH, OW]` with the weight as it is.
    Forward,
    /// The input's gradient: `[N, O, OH, OW]` → `[N, C, H, W]` with the weight flipped along
    /// `kh` and `kw` and read `[C, O, kh, kw]`, the padding `kernel - 1 - padding`.
    InputGrad,
}

/// Whether the backend of `image`'s device convolves it directly with a kernel of `kernel`
/// and `padding` ([`run`]'s conditions): the image contiguous `[N, C, H, W]`, each padding
/// below its kernel size, and a backend that takes the dtype and the depth `C·kh·kw`.
pub(crate) fn takes(
    image: &Tensor,
    kernel: (usize, usize),
    padding: (usize, usize),
) -> Result<bool> {
    let shape = image.shape();
    if shape.len() != 4 || !image.is_contiguous() || padding.0 >= kernel.0 || padding.1 >= kernel.1
    {
        return Ok(false);
    }
    let depth = shape[1].saturating_mul(kernel.0).saturating_mul(kernel.1);
    Ok(for_device(image.device())?.direct_conv(image.dtype(), depth))
}

/// Writes the convolution of `image` by `weight` (`[O, C, kh, kw]`, any strides) in
/// `direction`, plus `bias` (forward only), into `out` (contiguous, of the result's shape),
/// with the forward convolution's `padding`. The caller has checked [`takes`] for the image
/// with the padding the direction uses.
pub(crate) fn run(
    image: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    padding: (usize, usize),
    direction: Direction,
    out: &Tensor,
) -> Result<()> {
    let (is, ws, os) = (image.shape(), weight.shape(), out.shape());
    if is.len() != 4 || ws.len() != 4 || padding.0 >= ws[2] || padding.1 >= ws[3] {
        return Err(misfit(&is, &ws, &os));
    }
    let (kh, kw) = (ws[2], ws[3]);
    let (n, c, h, w) = (is[0], is[1], is[2], is[3]);
    let ws4 = weight.stride();
    let (rows, weight_strides, flip, (ph, pw)) = match direction {
        Direction::Forward => (ws[0], [ws4[0], ws4[1], ws4[2], ws4[3]], false, padding),
        Direction::InputGrad => (
            ws[1],
            [ws4[1], ws4[0], ws4[2], ws4[3]],
            true,
            (kh - 1 - padding.0, kw - 1 - padding.1),
        ),
    };
    let channels = match direction {
        Direction::Forward => ws[1],
        Direction::InputGrad => ws[0],
    };
    let expected = [
        Some(n),
        Some(rows),
        out_size(h, ph, kh),
        out_size(w, pw, kw),
    ];
    let fits = channels == c
        && image.is_contiguous()
        && os.iter().map(|&d| Some(d)).eq(expected)
        && out.is_contiguous()
        && bias.is_none_or(|b| b.numel() == rows && direction == Direction::Forward);
    let same = [weight, out]
        .into_iter()
        .chain(bias)
        .all(|t| t.dtype() == image.dtype() && t.device() == image.device());
    if !fits || !same {
        return Err(misfit(&is, &ws, &os));
    }
    let mut operands = vec![image, weight];
    operands.extend(bias);
    let done = locked(&operands, out, |read, out| {
        let args = DirectConvArgs {
            dtype: image.dtype(),
            sizes: ConvSizes {
                n,
                c,
                h,
                w,
                o: rows,
                kh,
                kw,
                ph,
                pw,
            },
            x: read(0),
            weight: read(1),
            weight_strides,
            flip,
            bias: if bias.is_some() {
                read(2)
            } else {
                std::ptr::null()
            },
            bias_stride: bias.map_or(0, |b| b.stride()[0]),
            out,
        };
        // SAFETY: the image and the output are contiguous with the shapes above, the weight
        // and the bias addressed through their own layouts; the output is the caller's fresh
        // buffer, apart from every input; every storage is locked meanwhile.
        Ok(unsafe { for_device(image.device())?.conv2d_direct(&args) })
    })?;
    declined(done)
}

/// Writes the weight's gradient `[O, C, kh, kw]` of the direct convolution of `image`
/// (`[N, C, H, W]`) with `padding` into `out` (contiguous, of that shape), from the output's
/// gradient `grad` (contiguous `[N, O, OH, OW]`). The caller has checked [`takes`] for the
/// image.
pub(crate) fn weight_grad(
    image: &Tensor,
    grad: &Tensor,
    padding: (usize, usize),
    out: &Tensor,
) -> Result<()> {
    let (is, gs, os) = (image.shape(), grad.shape(), out.shape());
    if is.len() != 4 || os.len() != 4 {
        return Err(misfit(&is, &gs, &os));
    }
    let (n, c, h, w) = (is[0], is[1], is[2], is[3]);
    let expected = [
        Some(n),
        Some(os[0]),
        out_size(h, padding.0, os[2]),
        out_size(w, padding.1, os[3]),
    ];
    let fits = os[1] == c
        && padding.0 < os[2]
        && padding.1 < os[3]
        && gs.iter().map(|&d| Some(d)).eq(expected)
        && [image, grad, out].iter().all(|t| t.is_contiguous())
        && [grad, out]
            .iter()
            .all(|t| t.dtype() == image.dtype() && t.device() == image.device());
    if !fits {
        return Err(misfit(&is, &gs, &os));
    }
    let done = locked(&[image, grad], out, |read, out| {
        let args = DirectWeightGradArgs {
            dtype: image.dtype(),
            sizes: ConvSizes {
                n,
                c,
                h,
                w,
                o: os[0],
                kh: os[2],
                kw: os[3],
                ph: padding.0,
                pw: padding.1,
            },
            x: read(0),
            grad: read(1),
            out,
        };
        // SAFETY: the image, the gradient and the output are contiguous with the shapes
        // above; the output is the caller's fresh buffer, apart from both inputs; every
        // storage is locked meanwhile.
        Ok(unsafe { for_device(image.device())?.conv2d_direct_weight_grad(&args) })
    })?;
    declined(done)
}

/// The output size along one axis of a stride-1 convolution of `size` positions padded by
/// `pad` on each side with a kernel of `k`, if the kernel fits.
fn out_size(size: usize, pad: usize, k: usize) -> Option<usize> {
    (size + 2 * pad + 1).checked_sub(k).filter(|&s| s > 0)
}

/// The error for operands that do not fit a direct convolution: the image's shape, the
/// other input's (weight or output gradient) and the output's.
fn misfit(image: &[usize], other: &[usize], out: &[usize]) -> Error {
    Error::shape(
        "conv2d",
        format!(
            "a direct convolution's operands do not fit: image {image:?}, {other:?}, output \
             {out:?}"
        ),
        vec![image.to_vec(), other.to_vec(), out.to_vec()],
    )
}

/// Runs `f` with `reads` locked for reading and `out` for writing, given each read operand's
/// first element (by its index in `reads`) and the output's.
fn locked(
    reads: &[&Tensor],
    out: &Tensor,
    f: impl FnOnce(&dyn Fn(usize) -> *const u8, *mut u8) -> Result<bool>,
) -> Result<bool> {
    let reads: Vec<_> = reads.iter().map(|t| t.body()).collect();
    let writes = [out.body()];
    let guards = lock_bodies(&reads, &writes);
    let esize = out.dtype().size();
    let read = |i: usize| {
        let b = &reads[i];
        guards
            .read_ptr(&b.storage)
            .wrapping_add(b.layout.offset() * esize)
    };
    let written = guards
        .write_ptr(&writes[0].storage)
        .wrapping_add(writes[0].layout.offset() * esize);
    f(&read, written)
}

/// An error when a backend that says it takes a direct convolution declined it.
fn declined(done: bool) -> Result<()> {
    if done {
        return Ok(());
    }
    Err(Error::dtype(
        "conv2d",
        "the device's backend declined a direct convolution it says it takes",
        Some("this is a bug in the backend: its direct_conv() and its direct kernels disagree"),
    ))
}

#[cfg(test)]
mod tests {
    use super::{run, weight_grad, Direction};
    use crate::{DType, Error, Tensor};

    /// An image, a weight, the padding and the output's shape.
    type Case<'a> = (&'a Tensor, &'a Tensor, (usize, usize), &'a [usize]);

    fn zeros(shape: &[usize]) -> Tensor {
        Tensor::zeros(shape, DType::F32).unwrap()
    }

    #[test]
    fn operands_that_do_not_fit_are_errors_and_write_nothing() {
        let (x, w) = (zeros(&[2, 3, 5, 5]), zeros(&[4, 3, 3, 3]));
        let out = Tensor::full(&[2, 4, 5, 5], 7.0, DType::F32).unwrap();
        let cases: [Case<'_>; 5] = [
            // A 3-d image, a wrong output shape, padding as large as the kernel, a kernel
            // larger than the padded image, a weight of other channels.
            (&zeros(&[3, 5, 5]), &w, (1, 1), &[2, 4, 5, 5]),
            (&x, &w, (1, 1), &[2, 4, 4, 5]),
            (&x, &w, (3, 1), &[2, 4, 9, 5]),
            (&zeros(&[2, 3, 1, 1]), &w, (0, 0), &[2, 4, 1, 1]),
            (&x, &zeros(&[4, 2, 3, 3]), (1, 1), &[2, 4, 5, 5]),
        ];
        for (image, weight, padding, shape) in cases {
            let out = if shape == [2, 4, 5, 5] {
                out.clone()
            } else {
                zeros(shape)
            };
            let e = run(image, weight, None, padding, Direction::Forward, &out).unwrap_err();
            assert!(matches!(e, Error::Shape { .. }), "{e}");
        }
        assert!(out.to_vec::<f32>().unwrap().iter().all(|&v| v == 7.0));
        let gy = zeros(&[2, 4, 5, 5]);
        for gw in [
            zeros(&[4, 3, 3]),
            zeros(&[4, 3, 2, 3]),
            zeros(&[4, 2, 3, 3]),
        ] {
            let e = weight_grad(&x, &gy, (1, 1), &gw).unwrap_err();
            assert!(matches!(e, Error::Shape { .. }), "{e}");
        }
        // What fits runs: a zero image convolves to the bias.
        let b = Tensor::full(&[4], 0.5, DType::F32).unwrap();
        run(&x, &w, Some(&b), (1, 1), Direction::Forward, &out).unwrap();
        assert!(out.to_vec::<f32>().unwrap().iter().all(|&v| v == 0.5));
    }
}
