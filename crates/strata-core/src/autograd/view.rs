//! Views under autograd: the backward of every view op, and how views are recorded.
//!
//! A view's gradient goes back to its input in one of four ways: a reshape (same elements in
//! the same order), a permutation of dimensions, an expansion (summed back), or through the
//! storage geometry: the gradient is written at the storage positions the view covers and
//! read back at the positions the input covers. The last one serves every other view op
//! (`slice`, `select`, `narrow`, `diagonal`, `unfold`, `as_strided`, `split`, ...) and the
//! rewritten history of a view after an in-place op on its base.

use std::sync::Arc;

use super::record::{gradient_edge, Recorder};
use crate::layout::Layout;
use crate::mode::{is_grad_enabled, is_inference_mode_enabled, user_grad_mode};
use crate::op::OpContext;
use crate::tensor::graph::{BackwardFn, InputMeta, Node};
use crate::tensor::ViewCreation;
use crate::{DType, Device, Error, Result, Tensor};

/// How a view's gradient maps back to its input.
#[derive(Clone)]
pub(crate) enum ViewGrad {
    /// Same elements in the same order: reshape the gradient to this shape.
    Reshape(Vec<usize>),
    /// Dimensions reordered: output dim `i` is input dim `perm[i]`.
    Permute(Vec<usize>),
    /// Broadcast: sum the gradient back to this shape.
    Expand(Vec<usize>),
    /// Through storage positions: (input layout, view layout), and the view op itself for
    /// an input whose elements overlap in memory.
    Geometry(Box<(Layout, Layout, Option<Replay>)>),
}

/// The view op applied again to another tensor of the input's shape.
pub(crate) type Replay = Arc<dyn Fn(&Tensor) -> Result<Tensor> + Send + Sync>;

impl ViewGrad {
    pub fn apply(&self, g: &Tensor) -> Result<Tensor> {
        match self {
            ViewGrad::Reshape(shape) => g.reshape_to(shape),
            ViewGrad::Permute(perm) => {
                let mut inv = vec![0i64; perm.len()];
                for (i, &p) in perm.iter().enumerate() {
                    inv[p] = i as i64;
                }
                g.permute(&inv)
            }
            ViewGrad::Expand(shape) => sum_to(g, shape),
            ViewGrad::Geometry(geo) => {
                let (input, view, replay) = &**geo;
                geometry_backward(g, input, view, replay.as_ref())
            }
        }
    }
}

/// Sums `g` down to `shape` (the reverse of broadcasting `shape` to `g`'s shape).
pub(crate) fn sum_to(g: &Tensor, shape: &[usize]) -> Result<Tensor> {
    let gs = g.shape();
    if gs.as_slice() == shape {
        return Ok(g.clone());
    }
    let lead = gs.len().saturating_sub(shape.len());
    let mut dims: Vec<usize> = (0..lead).collect();
    for (i, &s) in shape.iter().enumerate() {
        if s == 1 && gs.get(lead + i).is_some_and(|&d| d != 1) {
            dims.push(lead + i);
        }
    }
    let summed = if dims.is_empty() {
        g.clone()
    } else {
        g.sum_over(&dims, true)?
    };
    summed.reshape_to(shape)
}

fn max_position(l: &Layout) -> usize {
    if l.numel() == 0 {
        return l.offset();
    }
    l.offset()
        + l.sizes()
            .iter()
            .zip(l.strides())
            .map(|(&n, &s)| (n - 1) * s)
            .sum::<usize>()
}

/// A zeroed flat tensor of `like`'s dtype covering every storage position of `layouts`, and
/// the lowest position (the buffer's element 0).
pub(crate) fn zeros_covering(like: &Tensor, layouts: &[&Layout]) -> Result<(Tensor, usize)> {
    let lo = layouts.iter().map(|l| l.offset()).min().unwrap_or(0);
    let hi = layouts.iter().map(|l| max_position(l)).max().unwrap_or(0);
    Ok((
        Tensor::on(like.device()).zeros(&[hi - lo + 1], like.dtype())?,
        lo,
    ))
}

/// The flat storage positions (relative to `lo`) of `l`'s elements, in logical order.
fn positions(l: &Layout, lo: usize, device: Device) -> Result<Tensor> {
    let n = l.ndim();
    let on = Tensor::on(device);
    let mut pos = on.scalar((l.offset() - lo) as i64, DType::I64)?;
    for (d, (&size, &stride)) in l.sizes().iter().zip(l.strides()).enumerate() {
        let mut shape = vec![1; n];
        shape[d] = size;
        let along = on
            .arange(size, DType::I64)?
            .mul(stride as i64)?
            .reshape_to(&shape)?;
        pos = pos.add(&along)?;
    }
    pos.expand_to(l.sizes())?.reshape(&[-1])
}

/// True when no two elements of `l` can share a storage position (strides sorted, each
/// larger than the span of the smaller ones). False may still be free of overlap.
pub(crate) fn surely_non_overlapping(l: &Layout) -> bool {
    let mut dims: Vec<(usize, usize)> = l
        .sizes()
        .iter()
        .zip(l.strides())
        .filter(|(&n, _)| n > 1)
        .map(|(&n, &s)| (s, n))
        .collect();
    dims.sort_unstable();
    let mut span = 0usize;
    for (stride, size) in dims {
        if stride <= span {
            return false;
        }
        span += (size - 1) * stride;
    }
    true
}

/// The gradient of a view's input from the view's gradient, through storage positions.
pub(crate) fn geometry_backward(
    g: &Tensor,
    input: &Layout,
    view: &Layout,
    replay: Option<&Replay>,
) -> Result<Tensor> {
    if !surely_non_overlapping(input) {
        if let Some(replay) = replay {
            // Number the input's elements, take the same view of the numbers, and add the
            // gradient at the numbers it picked.
            let n = input.numel();
            let ids = Tensor::on(g.device())
                .arange(n, DType::I64)?
                .reshape_to(input.sizes())?;
            let picked = replay(&ids)?.reshape(&[-1])?;
            let gx = Tensor::on(g.device()).zeros(&[n], g.dtype())?;
            gx.index_add_(0, &picked, &g.reshape(&[-1])?, 1)?;
            return gx.reshape_to(input.sizes());
        }
        return Err(Error::Autograd {
            message: "the gradient of a view of a tensor whose elements overlap in memory \
                      (an expanded tensor, say) cannot be computed through this view. Hint: \
                      call contiguous() on the overlapping tensor before taking the view"
                .into(),
        });
    }
    let (buffer, lo) = zeros_covering(g, &[input, view])?;
    if !surely_non_overlapping(view) {
        let idx = positions(view, lo, g.device())?;
        buffer.index_add_(0, &idx, &g.reshape(&[-1])?, 1)?;
    } else {
        buffer
            .as_strided(view.sizes(), view.strides(), Some(view.offset() - lo))?
            .copy_(g)?;
    }
    buffer.as_strided(input.sizes(), input.strides(), Some(input.offset() - lo))
}

fn creation_for_mode(creation: ViewCreation, inherited: Option<ViewCreation>) -> ViewCreation {
    let here = if is_inference_mode_enabled() {
        ViewCreation::InferenceMode
    } else if !user_grad_mode() {
        ViewCreation::NoGrad
    } else {
        creation
    };
    match (inherited, here) {
        (Some(ViewCreation::InferenceMode), _) => ViewCreation::InferenceMode,
        (Some(prev), ViewCreation::Plain) => prev,
        _ => here,
    }
}

impl Tensor {
    /// A view made by a user-facing view op: remembers how it was made and, when `self`
    /// requires grad, records the view's backward.
    pub(crate) fn tracked_view(
        &self,
        op: &'static str,
        layout: Layout,
        creation: ViewCreation,
        grad: ViewGrad,
    ) -> Tensor {
        let inherited = self.view_info().map(|v| v.creation);
        let creation = creation_for_mode(creation, inherited);
        let out = self.make_view(op, layout, creation);
        if let Some(o) = crate::tensor::view_observer() {
            o.view_made(&out);
        }
        if is_grad_enabled() && self.autograd_meta().requires_grad() {
            if let Some(edge) = gradient_edge(self) {
                let meta = InputMeta {
                    shape: self.shape().to_vec(),
                    dtype: self.dtype(),
                };
                let backward: BackwardFn = Box::new(move |g| Ok(vec![Some(grad.apply(&g)?)]));
                let node = Node::function(
                    view_backward_name(op),
                    vec![Some(edge)],
                    vec![Some(meta)],
                    backward,
                    false,
                    crate::op::outer_site().map(|(line, _)| line),
                );
                let meta = out.autograd_meta();
                let mut st = meta.state();
                st.grad_fn = Some(node);
                st.fn_version = out.version();
                meta.set_requires_grad(true);
            }
        }
        out
    }

    /// A view whose backward is decided by the op: reshapes and expansions by their shapes,
    /// everything else through storage geometry.
    pub(crate) fn view_by_op(
        &self,
        op: &'static str,
        layout: Layout,
        creation: ViewCreation,
    ) -> Tensor {
        let grad = match op {
            "view" | "reshape" | "alias" | "squeeze" | "unsqueeze" | "flatten" | "unflatten" => {
                ViewGrad::Reshape(self.shape().to_vec())
            }
            "expand" | "broadcast_to" => ViewGrad::Expand(self.shape().to_vec()),
            _ => ViewGrad::Geometry(Box::new((self.layout(), layout.clone(), None))),
        };
        self.tracked_view(op, layout, creation, grad)
    }

    /// A view that selects elements (`narrow`, `select`, `diagonal`, ...): its backward goes
    /// through storage geometry, or through `replay` when the input overlaps itself.
    pub(crate) fn view_with_replay(
        &self,
        op: &'static str,
        layout: Layout,
        creation: ViewCreation,
        replay: Replay,
    ) -> Tensor {
        let grad = ViewGrad::Geometry(Box::new((self.layout(), layout.clone(), Some(replay))));
        self.tracked_view(op, layout, creation, grad)
    }

    /// A view that reorders dimensions: output dim `i` is input dim `perm[i]`.
    pub(crate) fn permuted_view(
        &self,
        op: &'static str,
        layout: Layout,
        perm: Vec<usize>,
    ) -> Tensor {
        self.tracked_view(op, layout, ViewCreation::Plain, ViewGrad::Permute(perm))
    }
}

/// Records `out`, the contiguous copy `reshape` made of `x` where no view could express the
/// new shape: its gradient is reshaped back to `x`'s shape.
pub(crate) fn reshape_copy(ctx: &OpContext, x: &Tensor, out: &Tensor) {
    if let Some(rec) = Recorder::begin(ctx, "ReshapeAliasBackward0", &[x]) {
        let shape = x.shape();
        rec.finish(out, move |g| Ok(vec![Some(g.reshape_to(&shape)?)]));
    }
}

fn view_backward_name(op: &str) -> &'static str {
    match op {
        "view" | "alias" => "ViewBackward0",
        "reshape" | "flatten" | "unflatten" => "ViewBackward0",
        "squeeze" => "SqueezeBackward0",
        "unsqueeze" => "UnsqueezeBackward0",
        "expand" | "broadcast_to" => "ExpandBackward0",
        "transpose" => "TransposeBackward0",
        "t" => "TBackward0",
        "permute" | "movedim" => "PermuteBackward0",
        "narrow" | "slice" => "SliceBackward0",
        "select" | "unbind" => "SelectBackward0",
        "split" | "chunk" => "SplitBackward0",
        "diagonal" => "DiagonalBackward0",
        "unfold" => "UnfoldBackward0",
        _ => "AsStridedBackward0",
    }
}
