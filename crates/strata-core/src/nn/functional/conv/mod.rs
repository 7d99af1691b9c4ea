//! `conv2d`: directly where the backend convolves the geometry straight from the image
//! (stride 1, no dilation, one group, f32 on the CPU: see `ops::direct_conv`), the input's
//! gradient likewise as the convolution of the output's gradient by the flipped weight;
//! otherwise as matrix products over column matrices built for a slice of the batch at a
//! time, so the temporary stays bounded whatever the batch size.
//!
//! On the column path, forward builds the columns of up to [`COLUMN_BUDGET_BYTES`] worth of samples and
//! multiplies each group's weight into them, writing straight into the output. Backward
//! does the same per slice: the input's gradient is the weight's transpose times the output
//! gradient, added back onto the input positions the columns came from; the weight's
//! gradient accumulates slice by slice, each slice's product split in two along its long
//! depth (the positions) so that the halves run side by side.

mod columns;
mod geometry;

use super::Pair;
use crate::api::entry::Entry;
use crate::autograd::formulas::{record, take, Grads};
use crate::op::OpContext;
use crate::ops::direct_conv::{self, Direction};
use crate::{DType, Result, Tensor};
use geometry::{check, Geometry};

/// The most bytes of column matrix a convolution builds at once (8 MiB), in forward and in
/// each backward product. A batch is processed in slices of as many samples as fit; a
/// single sample whose columns are larger is built whole.
pub const COLUMN_BUDGET_BYTES: usize = 8 << 20;

/// The options of [`conv2d_with`], with PyTorch's defaults (stride 1, padding 0, dilation 1,
/// groups 1).
///
/// ```
/// use strata_core::nn::functional::{Conv2dOptions, Pair};
/// let o = Conv2dOptions { padding: Pair(1, 1), ..Default::default() };
/// assert_eq!(o.stride, Pair(1, 1));
/// assert_eq!(o.groups, 1);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dOptions {
    /// Distance between output positions, in input positions.
    pub stride: Pair,
    /// Zeros added on each side of the input.
    pub padding: Pair,
    /// Distance between the input positions a kernel reads.
    pub dilation: Pair,
    /// Channel groups: each group of `C/groups` input channels feeds `O/groups` outputs.
    pub groups: usize,
}

impl Default for Conv2dOptions {
    fn default() -> Self {
        Conv2dOptions {
            stride: Pair(1, 1),
            padding: Pair(0, 0),
            dilation: Pair(1, 1),
            groups: 1,
        }
    }
}

/// The 2-d convolution (cross-correlation) of `x` (`[N, C, H, W]`, or `[C, H, W]` for one
/// sample) with `weight` (`[O, C, kh, kw]`), plus `bias` (`[O]`) when given, with `stride`
/// and zero `padding`; see [`conv2d_with`] for dilation and groups. The result is
/// `[N, O, OH, OW]` with `OH = (H + 2·ph - kh) / sh + 1`.
///
/// ```
/// use strata_core::nn::functional::conv2d;
/// use strata_core::{DType, Tensor};
/// let x = Tensor::arange(9, DType::F32)?.view(&[1, 1, 3, 3])?;
/// let w = Tensor::ones(&[1, 1, 2, 2], DType::F32)?;
/// let y = conv2d(&x, &w, None, 1, 0)?;
/// assert_eq!(y.shape().as_slice(), [1, 1, 2, 2]);
/// assert_eq!(y.to_vec::<f32>()?, vec![8.0, 12.0, 20.0, 24.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn conv2d(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    stride: impl Into<Pair>,
    padding: impl Into<Pair>,
) -> Result<Tensor> {
    let opts = Conv2dOptions {
        stride: stride.into(),
        padding: padding.into(),
        ..Default::default()
    };
    conv2d_with(x, weight, bias, opts)
}

/// PyTorch's `F.conv2d` with every option: `x` (`[N, C, H, W]` or `[C, H, W]`) convolved
/// with `weight` (`[O, C/groups, kh, kw]`), plus `bias` (`[O]`). The result is
/// `[N, O, OH, OW]` with `OH = (H + 2·ph - dh·(kh - 1) - 1) / sh + 1`.
///
/// Memory: on the CPU, an f32 convolution with stride 1, no dilation, one group, padding
/// below the kernel, a contiguous input and at most 1024 steps of depth (`C·kh·kw`) is
/// computed straight from the image: forward allocates nothing but its output, and the
/// input's gradient (from a contiguous output gradient, depth `O·kh·kw`) nothing but
/// itself. Otherwise, besides the output, forward holds one column buffer of at most
/// [`COLUMN_BUDGET_BYTES`] (none for a 1×1 kernel with stride 1 and no padding), and so does
/// the input's gradient. The backward node saves the input and the weight (no copies); the
/// weight's gradient holds one column buffer of the same bound, a copy of one slice of the
/// output gradient, and two weight-sized buffers of partial sums (in f32 and f64 its
/// product is split in two along the positions, one half per thread; one buffer in f16
/// and bf16, whose product rounds once). A bf16 or f16 convolution with a bias
/// computes its forward in f32 (f32 copies of the input, weight and output) so that the
/// bias is added before the one rounding, as in PyTorch.
///
/// ```
/// use strata_core::nn::functional::{conv2d_with, Conv2dOptions, Pair};
/// use strata_core::{DType, Tensor};
/// let x = Tensor::ones(&[1, 4, 5, 5], DType::F32)?;
/// let w = Tensor::ones(&[2, 2, 3, 3], DType::F32)?;
/// let opts = Conv2dOptions { dilation: Pair(2, 2), groups: 2, ..Default::default() };
/// let y = conv2d_with(&x, &w, None, opts)?;
/// assert_eq!(y.shape().as_slice(), [1, 2, 1, 1]);
/// assert_eq!(y.to_vec::<f32>()?, vec![18.0, 18.0]);
/// # Ok::<(), strata_core::Error>(())
/// ```
#[track_caller]
pub fn conv2d_with(
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    opts: Conv2dOptions,
) -> Result<Tensor> {
    let mut inputs = vec![x, weight];
    inputs.extend(bias);
    Entry::new("conv2d", &inputs)?
        .run(
            |ctx, t| forward(ctx, t[0], t[1], t.get(2).copied(), &opts),
            |ctx, t, (out, g)| backward(ctx, t, out, *g),
        )
        .map(|(out, _)| out)
}

/// The parts an f32 or f64 weight gradient's product is cut into along its depth (the
/// slice's positions), computed side by side and summed: one product with a small result
/// and a long depth threads poorly.
const DEPTH_SPLIT: usize = 2;

/// How many samples' columns fit in [`COLUMN_BUDGET_BYTES`] (at least one).
fn slice_samples(g: &Geometry, element_size: usize) -> usize {
    let per_sample = g.c * g.kernel.0 * g.kernel.1 * g.positions() * element_size;
    (COLUMN_BUDGET_BYTES / per_sample.max(1)).clamp(1, g.n.max(1))
}

/// The batch's slices: `(first sample, samples)`.
fn slices(g: &Geometry, step: usize) -> impl Iterator<Item = (usize, usize)> {
    let n = g.n;
    (0..n).step_by(step).map(move |s| (s, step.min(n - s)))
}

/// A column buffer for `step` samples, when the geometry needs one.
fn column_buffer(x: &Tensor, g: &Geometry, step: usize) -> Result<Option<Tensor>> {
    if g.columns_are_input() {
        return Ok(None);
    }
    let per_sample = g.c * g.kernel.0 * g.kernel.1 * g.positions();
    Tensor::on(x.device())
        .empty(&[step, per_sample], x.dtype())
        .map(Some)
}

/// The columns of `xs` (`b` samples) as `[b, groups, C/groups·kh·kw, OH·OW]`, built in
/// `buffer` (or `xs` itself when the geometry needs no columns).
fn columns_of(xs: &Tensor, buffer: Option<&Tensor>, g: &Geometry, b: usize) -> Result<Tensor> {
    let grouped = [b, g.groups, g.group_patch(), g.positions()];
    let Some(buffer) = buffer else {
        return xs.reshape_to(&grouped);
    };
    let cols = buffer.narrow(0, 0, b)?;
    columns::fill(xs, &cols.view_to(&six_d(g, b))?, g)?;
    cols.view_to(&grouped)
}

/// `[b, C, kh, kw, OH, OW]`.
fn six_d(g: &Geometry, b: usize) -> [usize; 6] {
    [b, g.c, g.kernel.0, g.kernel.1, g.oh, g.ow]
}

/// The weight as `[groups, O/groups, C/groups·kh·kw]`.
fn grouped_weight(weight: &Tensor, g: &Geometry) -> Result<Tensor> {
    weight.reshape_to(&[g.groups, g.group_outputs(), g.group_patch()])
}

/// The convolution, and its checked sizes.
fn forward(
    ctx: &OpContext,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
) -> Result<(Tensor, Geometry)> {
    let g = check(ctx.op(), x, weight, bias, opts)?;
    if let Some(b) = bias.filter(|_| matches!(x.dtype(), DType::BF16 | DType::F16)) {
        // PyTorch adds a half-precision bias inside the product, rounding once: compute
        // in f32 (exact for the operands, summed in f32 as the half product is) and round.
        let wide = |t: &Tensor| t.to(DType::F32);
        let (y, g) = forward(ctx, &wide(x)?, &wide(weight)?, Some(&wide(b)?), opts)?;
        return Ok((y.to(x.dtype())?, g));
    }
    let unbatched = x.dim() == 3;
    let xb = if unbatched {
        x.unsqueeze(0)?
    } else {
        x.clone()
    };
    let y = Tensor::on(x.device()).empty(&[g.n, g.o, g.oh, g.ow], x.dtype())?;
    if direct(&xb, &g, g.padding)? {
        direct_conv::run(&xb, weight, bias, pair(g.padding), Direction::Forward, &y)?;
        y.reset_fresh_version();
        let y = if unbatched { y.squeeze(Some(&[0]))? } else { y };
        return Ok((y, g));
    }
    let wg = grouped_weight(weight, &g)?;
    let step = slice_samples(&g, x.dtype().size());
    let buffer = column_buffer(x, &g, step)?;
    let out_shape = [g.groups, g.group_outputs(), g.positions()];
    for (first, b) in slices(&g, step) {
        let cols = columns_of(&xb.narrow(0, first as i64, b)?, buffer.as_ref(), &g, b)?;
        let ys = y.narrow(0, first as i64, b)?;
        wg.matmul_out(&cols, &ys.view_to(&[&[b], &out_shape[..]].concat())?)?;
    }
    drop(buffer);
    if let Some(bias) = bias {
        y.add_(&bias.view_to(&[g.o, 1, 1])?)?;
    }
    y.reset_fresh_version();
    let y = if unbatched { y.squeeze(Some(&[0]))? } else { y };
    Ok((y, g))
}

/// Records `out = conv2d(inputs)` (the input, the weight, and the bias when there is one).
fn backward(ctx: &OpContext, inputs: &[&Tensor], out: &Tensor, g: Geometry) -> Result<()> {
    let (x, weight) = (inputs[0], inputs[1]);
    let has_b = inputs.len() > 2;
    let unbatched = x.dim() == 3;
    record(ctx, "ConvolutionBackward0", inputs, out, |rec| {
        let (need_x, need_w) = (rec.needs(0), rec.needs(1));
        let need_b = has_b && rec.needs(2);
        let sx = rec.save_if(need_w, x)?;
        let sw = rec.save_if(need_x, weight)?;
        Ok(move |grad: Tensor| -> Grads {
            let gy = if unbatched { grad.unsqueeze(0)? } else { grad };
            let gx = if need_x {
                let gx = input_grad(&gy, &take(&sw)?, &g)?;
                Some(if unbatched {
                    gx.squeeze(Some(&[0]))?
                } else {
                    gx
                })
            } else {
                None
            };
            let gw = if need_w {
                let x = take(&sx)?;
                let xb = if unbatched { x.unsqueeze(0)? } else { x };
                Some(weight_grad(&gy, &xb, &g)?)
            } else {
                None
            };
            let mut grads = vec![gx, gw];
            if has_b {
                grads.push(if need_b {
                    Some(gy.sum(Some(&[0, 2, 3]), false)?)
                } else {
                    None
                });
            }
            Ok(grads)
        })
    })
}

/// Whether the convolution of `g` runs directly over `image` (the input, or for the input's
/// gradient the output's gradient) with `padding`: stride 1, no dilation, one group, and a
/// backend that takes it ([`direct_conv::takes`]).
fn direct(image: &Tensor, g: &Geometry, padding: Pair) -> Result<bool> {
    if g.groups != 1 || g.stride != Pair(1, 1) || g.dilation != Pair(1, 1) {
        return Ok(false);
    }
    direct_conv::takes(image, pair(g.kernel), pair(padding))
}

/// A pair as a tuple.
fn pair(p: Pair) -> (usize, usize) {
    (p.0, p.1)
}

/// The input's gradient `[N, C, H, W]`: directly when [`direct`] takes the output's
/// gradient (a convolution of it by the flipped weight); otherwise per slice, `Wᵀ · gy` as columns, added back.
fn input_grad(gy: &Tensor, weight: &Tensor, g: &Geometry) -> Result<Tensor> {
    let flipped_padding = Pair(
        (g.kernel.0 - 1).saturating_sub(g.padding.0),
        (g.kernel.1 - 1).saturating_sub(g.padding.1),
    );
    if g.padding.0 < g.kernel.0 && g.padding.1 < g.kernel.1 && direct(gy, g, flipped_padding)? {
        let gx = Tensor::on(gy.device()).empty(&[g.n, g.c, g.h, g.w], gy.dtype())?;
        direct_conv::run(gy, weight, None, pair(g.padding), Direction::InputGrad, &gx)?;
        return Ok(gx);
    }
    let gx = Tensor::on(gy.device()).zeros(&[g.n, g.c, g.h, g.w], gy.dtype())?;
    let wt = grouped_weight(weight, g)?.transpose(1, 2)?;
    let step = slice_samples(g, gy.dtype().size());
    let buffer = column_buffer(gy, g, step)?;
    for (first, b) in slices(g, step) {
        let gys = gy.narrow(0, first as i64, b)?.reshape_to(&[
            b,
            g.groups,
            g.group_outputs(),
            g.positions(),
        ])?;
        let gxs = gx.narrow(0, first as i64, b)?;
        match &buffer {
            None => {
                let shape = [b, g.groups, g.group_patch(), g.positions()];
                wt.matmul_out(&gys, &gxs.view_to(&shape)?)?;
            }
            Some(buffer) => {
                let cols = buffer.narrow(0, 0, b)?;
                let shape = [b, g.groups, g.group_patch(), g.positions()];
                wt.matmul_out(&gys, &cols.view_to(&shape)?)?;
                columns::add_back(&cols.view_to(&six_d(g, b))?, &gxs, g)?;
            }
        }
    }
    Ok(gx)
}

/// The weight's gradient `[O, C/groups, kh, kw]`: directly when [`direct`] takes the input
/// and the output's gradient is contiguous; otherwise per slice, `gy · colsᵀ` summed over the
/// slice's samples in [`DEPTH_SPLIT`] products side by side, accumulated into one
/// weight-sized buffer.
fn weight_grad(gy: &Tensor, x: &Tensor, g: &Geometry) -> Result<Tensor> {
    if gy.is_contiguous() && direct(x, g, g.padding)? {
        let gw = Tensor::on(gy.device()).empty(&[g.o, g.c, g.kernel.0, g.kernel.1], gy.dtype())?;
        direct_conv::weight_grad(x, gy, pair(g.padding), &gw)?;
        return Ok(gw);
    }
    let (groups, og, k, l) = (g.groups, g.group_outputs(), g.group_patch(), g.positions());
    let step = slice_samples(g, x.dtype().size());
    let dev = x.device();
    // Columns laid out [C, kh, kw, b, OH, OW]: each group's [K, b·L] matrix is contiguous.
    let per_sample = g.c * g.kernel.0 * g.kernel.1 * l;
    let buffer = Tensor::on(dev).empty(&[per_sample * step], x.dtype())?;
    let gw = Tensor::on(dev).zeros(&[groups, og, k], gy.dtype())?;
    // f16 and bf16 products sum in f32 and round once, as PyTorch's: split, they would
    // round each part and then their sum.
    let parts_per_slice = if matches!(gy.dtype(), DType::F16 | DType::BF16) {
        1
    } else {
        DEPTH_SPLIT
    };
    let part = Tensor::on(dev).empty(&[parts_per_slice, groups, og, k], gy.dtype())?;
    for (first, b) in slices(g, step) {
        let cols = buffer.narrow(0, 0, per_sample * b)?;
        let as_six = cols
            .view_to(&[g.c, g.kernel.0, g.kernel.1, b, g.oh, g.ow])?
            .permute(&[3, 0, 1, 2, 4, 5])?;
        columns::fill(&x.narrow(0, first as i64, b)?, &as_six, g)?;
        // The depth b·L cut into `split` equal parts, one product each (side by side on
        // the pool), summed after.
        let split = if (b * l).is_multiple_of(parts_per_slice) {
            parts_per_slice
        } else {
            1
        };
        let depth = b * l / split;
        let cols = cols
            .view_to(&[groups, k, split, depth])?
            .permute(&[2, 0, 3, 1])?;
        // gy's slice as [groups, O/groups, b·L] (one copy of the slice), then as
        // [split, groups, O/groups, depth].
        let gys = gy
            .narrow(0, first as i64, b)?
            .reshape_to(&[b, groups, og, l])?
            .permute(&[1, 2, 0, 3])?
            .reshape_to(&[groups, og, split, depth])?
            .permute(&[2, 0, 1, 3])?;
        let parts = part.narrow(0, 0, split)?;
        gys.matmul_out(&cols, &parts)?;
        for s in 0..split {
            gw.add_(&parts.select(0, s as i64)?)?;
        }
    }
    gw.view_to(&[g.o, g.group_channels(), g.kernel.0, g.kernel.1])
}
