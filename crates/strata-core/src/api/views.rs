//! View ops: new tensors over the same storage, never a copy (except `reshape` when it must).
//! What each view is (its layout) comes from [`crate::ops::views`]; the view is made, and
//! its backward recorded, by [`crate::autograd::view`].

use std::sync::Arc;

use super::entry::Entry;
use crate::autograd::view as grad;
use crate::layout::int_arg::IntArg;
use crate::layout::shape_arg::IntoShape;
use crate::layout::Layout;
use crate::op::OpContext;
use crate::ops::views::{self as fwd, Pieces, Reshaped, SplitSize};
use crate::tensor::ViewCreation;
use crate::{Result, Tensor};

/// A view whose layout `layout` works out, its backward decided by the op's name
/// (reshapes and expansions by their shapes, everything else through storage geometry).
#[track_caller]
fn view_by_op(
    x: &Tensor,
    name: &'static str,
    layout: impl FnOnce(&OpContext, &Tensor) -> Result<Layout>,
) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_view(layout, |ctx, x, l| {
        Ok(x.view_by_op(ctx.op(), l, ViewCreation::Plain))
    })
}

/// A view that reorders dimensions, as `permuted` works it out.
#[track_caller]
fn permuted(
    x: &Tensor,
    name: &'static str,
    permuted: impl FnOnce(&OpContext, &Tensor) -> Result<fwd::Permuted>,
) -> Result<Tensor> {
    Entry::new(name, &[x])?.run_view(permuted, |ctx, x, (l, perm)| {
        Ok(x.permuted_view(ctx.op(), l, perm))
    })
}

/// The views of `pieces`, each recorded as a `narrow` of `x` (`split`, `chunk`).
fn split_views(ctx: &OpContext, x: &Tensor, (d, pieces): Pieces) -> Vec<Tensor> {
    pieces
        .into_iter()
        .map(|(layout, start, len)| {
            let from = start as i64;
            x.view_with_replay(
                ctx.op(),
                layout,
                ViewCreation::MultiOutput,
                Arc::new(move |t: &Tensor| t.narrow(d as i64, from, len)),
            )
        })
        .collect()
}

/// `reshape`: a view when the strides allow it, else a contiguous copy whose backward
/// reshapes the gradient back.
#[track_caller]
fn reshape<S: IntArg>(x: &Tensor, shape: &[S]) -> Result<Tensor> {
    Entry::new("reshape", &[x])?.run_view(
        |ctx, x| fwd::reshape(ctx, x, shape),
        |ctx, x, r| match r {
            Reshaped::View(l) => Ok(x.view_by_op(ctx.op(), l, ViewCreation::Plain)),
            Reshaped::Copy(out) => {
                grad::reshape_copy(ctx, x, &out);
                Ok(out)
            }
        },
    )
}

impl Tensor {
    /// The same elements seen with another shape, without copying. One dimension may be -1.
    /// Fails when the strides cannot express the new shape: use [`Tensor::reshape`], which
    /// copies when it must.
    #[track_caller]
    pub fn view(&self, shape: &(impl IntoShape + ?Sized)) -> Result<Tensor> {
        view_by_op(self, "view", |ctx, x| fwd::view(ctx, x, shape.sizes()))
    }

    /// [`Tensor::view`] to a shape strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn view_to(&self, shape: &[usize]) -> Result<Tensor> {
        view_by_op(self, "view", |ctx, x| fwd::view(ctx, x, shape))
    }

    /// The same elements with another shape: a view when the strides allow it, else a
    /// contiguous copy.
    #[track_caller]
    pub fn reshape(&self, shape: &(impl IntoShape + ?Sized)) -> Result<Tensor> {
        reshape(self, shape.sizes())
    }

    /// [`Tensor::reshape`] to a shape strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn reshape_to(&self, shape: &[usize]) -> Result<Tensor> {
        reshape(self, shape)
    }

    /// Swaps two dimensions.
    #[track_caller]
    pub fn transpose(&self, dim0: i64, dim1: i64) -> Result<Tensor> {
        permuted(self, "transpose", |ctx, x| {
            fwd::transpose(ctx, x, dim0, dim1)
        })
    }

    /// Transposes a matrix; a 0-d or 1-d tensor is returned as a view of itself.
    #[track_caller]
    pub fn t(&self) -> Result<Tensor> {
        permuted(self, "t", fwd::t)
    }

    /// Reorders the dimensions: dimension `i` of the result is `dims[i]` of this tensor.
    #[track_caller]
    pub fn permute(&self, dims: &[i64]) -> Result<Tensor> {
        permuted(self, "permute", |ctx, x| fwd::permute(ctx, x, dims))
    }

    /// Elements `start..start + length` of dimension `dim` (`start` may be negative).
    #[track_caller]
    pub fn narrow(&self, dim: impl IntArg, start: impl IntArg, length: usize) -> Result<Tensor> {
        let (dim, start) = (dim.signed(), start.signed());
        Entry::new("narrow", &[self])?.run_view(
            |ctx, x| fwd::narrow(ctx, x, dim, start, length),
            |ctx, x, (layout, d, s)| {
                Ok(x.view_with_replay(
                    ctx.op(),
                    layout,
                    ViewCreation::Plain,
                    Arc::new(move |t: &Tensor| t.narrow(d as i64, s as i64, length)),
                ))
            },
        )
    }

    /// Python slicing `x[start:end:step]` along `dim`: missing bounds mean the whole range,
    /// negative bounds count from the end, out-of-range bounds clamp.
    #[track_caller]
    pub fn slice(
        &self,
        dim: i64,
        start: Option<i64>,
        end: Option<i64>,
        step: usize,
    ) -> Result<Tensor> {
        Entry::new("slice", &[self])?.run_view(
            |ctx, x| fwd::slice(ctx, x, dim, start, end, step),
            |ctx, x, (layout, d, from, to)| {
                Ok(x.view_with_replay(
                    ctx.op(),
                    layout,
                    ViewCreation::Plain,
                    Arc::new(move |t: &Tensor| t.slice(d as i64, Some(from), Some(to), step)),
                ))
            },
        )
    }

    /// The slice at `index` of dimension `dim`, which is removed.
    #[track_caller]
    pub fn select(&self, dim: impl IntArg, index: impl IntArg) -> Result<Tensor> {
        let (dim, index) = (dim.signed(), index.signed());
        Entry::new("select", &[self])?.run_view(
            |ctx, x| fwd::select(ctx, x, dim, index),
            |ctx, x, part| Ok(selected(ctx, x, part, ViewCreation::Plain)),
        )
    }

    /// Repeats size-1 dimensions (and adds leading ones) without copying: stretched
    /// dimensions get stride 0. `-1` keeps a dimension's size.
    #[track_caller]
    pub fn expand(&self, shape: &(impl IntoShape + ?Sized)) -> Result<Tensor> {
        view_by_op(self, "expand", |ctx, x| fwd::expand(ctx, x, shape.sizes()))
    }

    /// [`Tensor::expand`] to a shape strata's own code holds as `usize`s.
    #[track_caller]
    pub(crate) fn expand_to(&self, shape: &[usize]) -> Result<Tensor> {
        view_by_op(self, "expand", |ctx, x| fwd::expand(ctx, x, shape))
    }

    /// The same as [`Tensor::expand`]: this tensor seen with a broadcast shape.
    #[track_caller]
    pub fn broadcast_to(&self, shape: &(impl IntoShape + ?Sized)) -> Result<Tensor> {
        view_by_op(self, "broadcast_to", |ctx, x| {
            fwd::expand(ctx, x, shape.sizes())
        })
    }

    /// Removes size-1 dimensions: all of them (`None`), or those among `dims` (others are
    /// left as they are).
    #[track_caller]
    pub fn squeeze(&self, dims: Option<&[i64]>) -> Result<Tensor> {
        view_by_op(self, "squeeze", |ctx, x| fwd::squeeze(ctx, x, dims))
    }

    /// Inserts a size-1 dimension at `dim` (which may be `dim()` to append).
    #[track_caller]
    pub fn unsqueeze(&self, dim: impl IntArg) -> Result<Tensor> {
        let dim = dim.signed();
        view_by_op(self, "unsqueeze", |ctx, x| fwd::unsqueeze(ctx, x, dim))
    }

    /// Merges dimensions `start_dim..=end_dim` into one (a view when possible, like reshape).
    #[track_caller]
    pub fn flatten(&self, start_dim: impl IntArg, end_dim: impl IntArg) -> Result<Tensor> {
        let (start_dim, end_dim) = (start_dim.signed(), end_dim.signed());
        Entry::new("flatten", &[self])?.run_view(
            |ctx, x| fwd::flatten(ctx, x, start_dim, end_dim),
            |_, x, shape| match shape {
                Some(shape) => x.reshape_to(&shape),
                None => Ok(x.clone()),
            },
        )
    }

    /// Splits dimension `dim` into `sizes` (one of which may be -1), as a view.
    #[track_caller]
    pub fn unflatten(&self, dim: i64, sizes: &[i64]) -> Result<Tensor> {
        view_by_op(self, "unflatten", |ctx, x| {
            fwd::unflatten(ctx, x, dim, sizes)
        })
    }

    /// A view with arbitrary sizes, strides and storage offset (absolute, in elements; `None`
    /// keeps this tensor's). It may overlap itself; writing to such a view is refused.
    #[track_caller]
    pub fn as_strided(
        &self,
        shape: &[usize],
        strides: &[usize],
        offset: Option<usize>,
    ) -> Result<Tensor> {
        view_by_op(self, "as_strided", |ctx, x| {
            fwd::as_strided(ctx, x, shape, strides, offset)
        })
    }

    /// The diagonal of dimensions `dim1` and `dim2` (shifted by `offset`), as a new last
    /// dimension.
    #[track_caller]
    pub fn diagonal(&self, offset: i64, dim1: i64, dim2: i64) -> Result<Tensor> {
        Entry::new("diagonal", &[self])?.run_view(
            |ctx, x| fwd::diagonal(ctx, x, offset, dim1, dim2),
            |ctx, x, layout| {
                Ok(x.view_with_replay(
                    ctx.op(),
                    layout,
                    ViewCreation::Plain,
                    Arc::new(move |t: &Tensor| t.diagonal(offset, dim1, dim2)),
                ))
            },
        )
    }

    /// Sliding windows of `size` elements, `step` apart, along `dim`, as a new last
    /// dimension. Windows may overlap; no data is copied.
    #[track_caller]
    pub fn unfold(&self, dim: i64, size: usize, step: usize) -> Result<Tensor> {
        Entry::new("unfold", &[self])?.run_view(
            |ctx, x| fwd::unfold(ctx, x, dim, size, step),
            |ctx, x, layout| {
                Ok(x.view_with_replay(
                    ctx.op(),
                    layout,
                    ViewCreation::Plain,
                    Arc::new(move |t: &Tensor| t.unfold(dim, size, step)),
                ))
            },
        )
    }

    /// Moves dimensions `source` to positions `destination`, keeping the others in order.
    #[track_caller]
    pub fn movedim(&self, source: &[i64], destination: &[i64]) -> Result<Tensor> {
        permuted(self, "movedim", |ctx, x| {
            fwd::movedim(ctx, x, source, destination)
        })
    }

    /// Splits `dim` into pieces (views).
    #[track_caller]
    pub fn split(&self, size: SplitSize, dim: i64) -> Result<Vec<Tensor>> {
        Entry::new("split", &[self])?.run_view(
            |ctx, x| fwd::split(ctx, x, size, dim),
            |ctx, x, pieces| Ok(split_views(ctx, x, pieces)),
        )
    }

    /// Splits `dim` into `chunks` nearly equal pieces (views); there may be fewer.
    #[track_caller]
    pub fn chunk(&self, chunks: usize, dim: i64) -> Result<Vec<Tensor>> {
        Entry::new("chunk", &[self])?.run_view(
            |ctx, x| fwd::chunk(ctx, x, chunks, dim),
            |ctx, x, pieces| Ok(split_views(ctx, x, pieces)),
        )
    }

    /// Every slice along `dim` (views), with `dim` removed.
    #[track_caller]
    pub fn unbind(&self, dim: i64) -> Result<Vec<Tensor>> {
        Entry::new("unbind", &[self])?.run_view(
            |ctx, x| fwd::unbind(ctx, x, dim),
            |ctx, x, parts| {
                Ok(parts
                    .into_iter()
                    .map(|part| selected(ctx, x, part, ViewCreation::MultiOutput))
                    .collect())
            },
        )
    }

    /// A new view of the same elements with the same shape (`view_as(self)`). Like any
    /// `view`, the strides of size-1 dimensions are recomputed.
    #[track_caller]
    pub fn alias(&self) -> Result<Tensor> {
        view_by_op(self, "alias", fwd::alias)
    }

    /// A tensor sharing this one's memory and version counter, cut off from autograd history.
    #[track_caller]
    pub fn detach(&self) -> Result<Tensor> {
        Entry::new("detach", &[self])?.run_view(|_, x| Ok(fwd::detach(x)), |_, _, d| Ok(d))
    }
}

/// The view of one slice `part` of `x` (`select`, `unbind`), replayed as a `select`.
fn selected(
    ctx: &OpContext,
    x: &Tensor,
    (layout, d, i): fwd::Part,
    creation: ViewCreation,
) -> Tensor {
    let at = i as i64;
    x.view_with_replay(
        ctx.op(),
        layout,
        creation,
        Arc::new(move |t: &Tensor| t.select(d as i64, at)),
    )
}
