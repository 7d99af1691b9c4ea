//! The sizes of one convolution, checked before anything is allocated.

use super::super::check::{dtype_is, floating, ndim_in, shape};
use super::super::Pair;
use super::Conv2dOptions;
use crate::{Error, Result, Tensor};

/// The checked sizes of a convolution of `[N, C, H, W]` by `[O, C/groups, kh, kw]`.
#[derive(Clone, Copy, Debug)]
pub(super) struct Geometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub o: usize,
    pub groups: usize,
    pub kernel: Pair,
    pub stride: Pair,
    pub padding: Pair,
    pub dilation: Pair,
    pub oh: usize,
    pub ow: usize,
}

impl Geometry {
    /// Input channels per group.
    pub fn group_channels(&self) -> usize {
        self.c / self.groups
    }

    /// Output channels per group.
    pub fn group_outputs(&self) -> usize {
        self.o / self.groups
    }

    /// Rows of one group's column matrix: `C/groups·kh·kw`.
    pub fn group_patch(&self) -> usize {
        self.group_channels() * self.kernel.0 * self.kernel.1
    }

    /// Output positions per plane: `OH·OW`.
    pub fn positions(&self) -> usize {
        self.oh * self.ow
    }

    /// Whether the column matrix of a sample is the sample itself (a 1×1 kernel, stride 1,
    /// no padding), so no columns need building.
    pub fn columns_are_input(&self) -> bool {
        self.kernel == Pair(1, 1) && self.stride == Pair(1, 1) && self.padding == Pair(0, 0)
    }
}

/// Checks a convolution's operands and options, returning its sizes.
pub(super) fn check(
    op: &'static str,
    x: &Tensor,
    weight: &Tensor,
    bias: Option<&Tensor>,
    opts: &Conv2dOptions,
) -> Result<Geometry> {
    floating(op, "the input", x)?;
    dtype_is(op, "the weight", weight, x.dtype())?;
    ndim_in(op, "the input", x, &[3, 4])?;
    ndim_in(op, "the weight", weight, &[4])?;
    let xs = x.shape().to_vec();
    let xs4: Vec<usize> = if xs.len() == 3 {
        [&[1], &xs[..]].concat()
    } else {
        xs.clone()
    };
    let ws = weight.shape().to_vec();
    let (n, c, h, w) = (xs4[0], xs4[1], xs4[2], xs4[3]);
    let (o, kernel) = (ws[0], Pair(ws[2], ws[3]));
    let Conv2dOptions {
        stride,
        padding,
        dilation,
        groups,
    } = *opts;
    if groups == 0 {
        return Err(Error::argument(
            op,
            "groups must be positive, got 0",
            Some("use groups=1 for a dense convolution"),
        ));
    }
    if c % groups != 0 || o % groups != 0 {
        return Err(shape(
            op,
            format!(
                "groups={groups} must divide both the input's {c} channels and the weight's {o} \
                 output channels"
            ),
            vec![xs, ws],
            "choose groups among the common divisors of in_channels and out_channels",
        ));
    }
    if ws[1] * groups != c {
        return Err(shape(
            op,
            format!(
                "the input has {c} channels but the weight {ws:?} with groups={groups} expects {}",
                ws[1] * groups
            ),
            vec![xs, ws],
            "the weight has shape [out_channels, in_channels / groups, kh, kw]",
        ));
    }
    for (what, p, min) in [("stride", stride, 1), ("dilation", dilation, 1)] {
        if p.0 < min || p.1 < min {
            return Err(Error::argument(
                op,
                format!("the {what} must be positive, got {p:?}"),
                Some("use 1 for a dense convolution"),
            ));
        }
    }
    let (hp, wp) = (h + 2 * padding.0, w + 2 * padding.1);
    let span = |k: usize, d: usize| d * (k.max(1) - 1) + 1;
    let (eh, ew) = (span(kernel.0, dilation.0), span(kernel.1, dilation.1));
    if kernel.0 == 0 || kernel.1 == 0 || hp < eh || wp < ew {
        return Err(shape(
            op,
            format!(
                "the padded input is {hp}x{wp}, smaller than the dilated kernel {eh}x{ew} (or the \
                 kernel is empty)"
            ),
            vec![xs, ws],
            "pad the input or use a smaller kernel",
        ));
    }
    if let Some(b) = bias {
        dtype_is(op, "the bias", b, x.dtype())?;
        if b.shape().as_slice() != [o] {
            return Err(shape(
                op,
                format!(
                    "the bias must have shape [{o}] (out_channels), got {:?}",
                    b.shape()
                ),
                vec![b.shape().to_vec(), ws],
                "give the bias one value per output channel",
            ));
        }
    }
    Ok(Geometry {
        n,
        c,
        h,
        w,
        o,
        groups,
        kernel,
        stride,
        padding,
        dilation,
        oh: (hp - eh) / stride.0 + 1,
        ow: (wp - ew) / stride.1 + 1,
    })
}

crate::autograd::selective::kept_as_copies!(Geometry);
