//! Joining: `cat` and `stack`, and their `out=` forms (in `out`).
//!
//! Every op validates its dims, shapes and dtypes before it allocates or writes anything. The
//! copies run through the element-wise engine (one plan per input, all storages locked in one
//! call).

pub(crate) mod out;
#[cfg(test)]
mod tests;

use crate::backend::{for_device, Backend};
use crate::backend::{Operand, Plan};
use crate::layout::order::{iteration_order, OrderOperand};
use crate::layout::overlap::{internal_overlap, InternalOverlap};
use crate::layout::view::compute_stride;
use crate::layout::{channels_last_strides, contiguous_strides, wrap_dim, Layout};
use crate::op::OpContext;
use crate::ops::promote::{result_type, Arg};
use crate::ops::views::dim_arg;
use crate::storage::{lock_storages, Access};
use crate::tensor::{Body, ViewCreation};
use crate::{DType, Error, Result, Tensor};

/// `Err` unless a tensor of `shape` and `dtype` can be addressed.
pub(crate) fn check_addressable(op: &'static str, shape: &[usize], dtype: DType) -> Result<()> {
    if Layout::contiguous(shape, 0)
        .validate(dtype.size())
        .is_some()
    {
        return Ok(());
    }
    Err(Error::shape(
        op,
        format!("a result of shape {shape:?} is too large to address"),
        vec![shape.to_vec()],
    ))
}

/// Whether a kernel may split its writes to `out` across threads.
pub(crate) fn parallel_writes(out: &Tensor) -> bool {
    internal_overlap(&out.layout()) == InternalOverlap::No
}

// ---------------------------------------------------------------------------------------------
// cat

/// The memory format PyTorch suggests for a tensor (`suggest_memory_format`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Contiguous,
    ChannelsLast,
    ChannelsLast3d,
}

/// PyTorch's `is_channels_last_strides_2d_s4` / `_3d_s5`: whether the strides look like
/// channels-last, with `order` the dimensions from fastest to slowest.
fn strides_like(sizes: &[usize], strides: &[usize], order: &[usize]) -> bool {
    if strides[1] == 0 {
        return false;
    }
    let mut min = 0usize;
    for &d in order {
        if sizes[d] == 0 || strides[d] < min {
            return false;
        }
        // N111-style ambiguity falls back to contiguous, as PyTorch does.
        if d == 0 && min == strides[1] {
            return false;
        }
        min = strides[d];
        if sizes[d] > 1 {
            min *= sizes[d];
        }
    }
    true
}

fn suggest_format(l: &Layout) -> Format {
    match l.ndim() {
        4 if strides_like(l.sizes(), l.strides(), &[1, 3, 2, 0]) => Format::ChannelsLast,
        5 if strides_like(l.sizes(), l.strides(), &[1, 4, 3, 2, 0]) => Format::ChannelsLast3d,
        _ => Format::Contiguous,
    }
}

/// Channels-last strides of a 5-d `[N, C, D, H, W]` shape (C fastest, then W, H, D, N).
fn channels_last_3d_strides(sizes: &[usize]) -> Vec<usize> {
    let mut s = vec![0; 5];
    s[1] = 1;
    s[4] = sizes[1].max(1);
    s[3] = s[4] * sizes[4].max(1);
    s[2] = s[3] * sizes[3].max(1);
    s[0] = s[2] * sizes[2].max(1);
    s
}

/// PyTorch's legacy rule: 1-d tensors of shape `[0]` are left out of `cat` whatever `dim` is.
fn skipped(shape: &[usize]) -> bool {
    shape == [0]
}

/// A validated `cat`: the result's shape, dtype and (for a new tensor) strides, and where
/// each input goes.
pub(crate) struct Cat {
    sizes: Vec<usize>,
    strides: Vec<usize>,
    dtype: DType,
    dim: usize,
    /// `(input, start along dim)` for every input that is not skipped.
    pieces: Vec<(usize, usize)>,
}

impl Cat {
    pub(crate) fn infer(op: &'static str, tensors: &[&Tensor], dim: i64) -> Result<Cat> {
        if tensors.is_empty() {
            return Err(Error::argument(
                op,
                "expected a non-empty list of tensors",
                Some("pass at least one tensor"),
            ));
        }
        let layouts: Vec<Layout> = tensors.iter().map(|t| t.layout()).collect();
        if let Some(i) = layouts.iter().position(|l| l.ndim() == 0) {
            return Err(Error::shape(
                op,
                format!("the tensor at position {i} is 0-d and cannot be concatenated"),
                vec![vec![]],
            )
            .with_hint(
                "unsqueeze(0) it first, or use stack to join tensors along a new dimension",
            ));
        }
        let valid = layouts.iter().position(|l| !skipped(l.sizes()));
        let dtype = result_type(&tensors.iter().map(|t| Arg::Tensor(t)).collect::<Vec<_>>());
        let format = layouts
            .iter()
            .map(suggest_format)
            .try_fold(None, |acc: Option<Format>, f| match (acc, f) {
                (_, Format::Contiguous) => Err(()),
                (Some(a), f) if a != f => Err(()),
                (_, f) => Ok(Some(f)),
            })
            .ok()
            .flatten()
            .unwrap_or(Format::Contiguous);
        // Every input but the skipped ones goes at `start` along `dim` of the result.
        let mut pieces: Vec<(usize, usize)> = Vec::new();
        let (sizes, d) = match valid {
            None => (vec![0], 0),
            Some(v) => {
                let first = layouts[v].sizes();
                let d = dim_arg(op, dim, first.len())?;
                let mut total = 0usize;
                for (i, l) in layouts.iter().enumerate() {
                    let s = l.sizes();
                    if skipped(s) {
                        continue;
                    }
                    if s.len() != first.len() {
                        return Err(Error::shape(
                            op,
                            format!(
                                "tensors must have the same number of dimensions: tensor {v} \
                                 has shape {first:?} but tensor {i} has shape {s:?}"
                            ),
                            vec![first.to_vec(), s.to_vec()],
                        )
                        .with_hint("reshape or unsqueeze the tensors to the same rank"));
                    }
                    if let Some(k) = (0..s.len()).find(|&k| k != d && s[k] != first[k]) {
                        return Err(Error::shape(
                            op,
                            format!(
                                "sizes must match except in dimension {d}: tensor {v} has shape \
                                 {first:?} but tensor {i} has shape {s:?} (dimension {k} \
                                 differs)"
                            ),
                            vec![first.to_vec(), s.to_vec()],
                        )
                        .with_hint("only the concatenated dimension may differ in size"));
                    }
                    pieces.push((i, total));
                    total = total.checked_add(s[d]).ok_or_else(|| {
                        Error::shape(op, "the result is too large to address", vec![])
                    })?;
                }
                let mut sizes = first.to_vec();
                sizes[d] = total;
                (sizes, d)
            }
        };
        let strides = match format {
            Format::Contiguous => contiguous_strides(&sizes),
            Format::ChannelsLast => channels_last_strides(&sizes),
            Format::ChannelsLast3d => channels_last_3d_strides(&sizes),
        };
        check_addressable(op, &sizes, dtype)?;
        Ok(Cat {
            sizes,
            strides,
            dtype,
            dim: d,
            pieces,
        })
    }

    /// The regions of the result the inputs are copied to: `(input, offset in elements from
    /// the result's first element, strides)` for a result with strides `strides`.
    pub(crate) fn regions(&self, strides: &[usize]) -> Vec<(usize, usize, Vec<usize>)> {
        self.pieces
            .iter()
            .map(|&(i, start)| (i, start * strides[self.dim], strides.to_vec()))
            .collect()
    }
}

/// Copies each input into its region of `out` (converting to `out`'s dtype): `regions`
/// holds `(input, offset from out's first element, strides)`, each region having its input's
/// shape. The inputs share no memory with `out`; `parallel` when `out` does not overlap
/// itself.
pub(crate) fn copy_regions(
    backend: &dyn Backend,
    tensors: &[&Tensor],
    out: &Tensor,
    regions: &[(usize, usize, Vec<usize>)],
    parallel: bool,
) {
    let bodies: Vec<Body> = tensors.iter().map(|t| t.body()).collect();
    let ob = out.body();
    let dtype = out.dtype();
    let mut locks = vec![(&*ob.storage, Access::Write)];
    locks.extend(bodies.iter().map(|b| (&*b.storage, Access::Read)));
    let guards = lock_storages(&locks);
    let out_base = guards
        .write_ptr(&ob.storage)
        .wrapping_add(ob.layout.offset() * dtype.size());
    for (i, offset, strides) in regions {
        let b = &bodies[*i];
        let shape = b.layout.sizes();
        if shape.contains(&0) {
            continue;
        }
        let in_strides = b.layout.strides();
        let perm = iteration_order(
            shape,
            &[
                OrderOperand {
                    strides,
                    is_reduction_output: false,
                },
                OrderOperand {
                    strides: in_strides,
                    is_reduction_output: false,
                },
            ],
        );
        let in_dtype = tensors[*i].dtype();
        let operands = [
            Operand {
                ptr: out_base.wrapping_add(offset * dtype.size()),
                strides: strides.clone(),
                dtype,
            },
            Operand {
                ptr: guards
                    .read_ptr(&b.storage)
                    .wrapping_add(b.layout.offset() * in_dtype.size())
                    as *mut u8,
                strides: in_strides.to_vec(),
                dtype: in_dtype,
            },
        ];
        // Parallel is sound when asked for: the region is written once per element and
        // shares no memory with any input.
        let plan = Plan::new(shape, &operands, &perm, parallel);
        // SAFETY: every storage is locked (the output's for writing); the region lies inside
        // the output (its elements along `dim`, or one slice of it for `stack`), and the
        // input's layout lies within its storage.
        unsafe { backend.copy(&plan) };
    }
}

/// The common shape of `stack`'s inputs and the new dimension's position, after checking
/// there is at least one input and all have that shape.
pub(crate) fn check_stack(
    op: &'static str,
    tensors: &[&Tensor],
    dim: i64,
) -> Result<(Vec<usize>, usize)> {
    let Some(first) = tensors.first() else {
        return Err(Error::argument(
            op,
            "expected a non-empty list of tensors",
            Some("pass at least one tensor"),
        ));
    };
    let shape = first.shape().to_vec();
    let n = shape.len();
    let d = wrap_dim(dim, n + 1).ok_or(Error::Dim {
        op,
        dim,
        ndim: n + 1,
    })?;
    if let Some((i, t)) = tensors
        .iter()
        .enumerate()
        .find(|(_, t)| t.shape().as_slice() != shape)
    {
        return Err(Error::shape(
            op,
            format!(
                "every tensor must have the same shape, but tensor 0 has shape {shape:?} and \
                 tensor {i} has shape {:?}",
                t.shape()
            ),
            vec![shape.clone(), t.shape().to_vec()],
        ));
    }
    Ok((shape, d))
}

/// `cat(tensors, dim)` into a new tensor (contiguous, or channels-last when every input is).
pub(crate) fn cat(ctx: &OpContext, tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
    let c = Cat::infer(ctx.op(), tensors, dim)?;
    let layout = Layout::new(c.sizes.clone(), c.strides.clone(), 0);
    let out = Tensor::uninit_with_layout(ctx, layout, c.dtype, tensors[0].device())?;
    copy_regions(
        for_device(out.device())?,
        tensors,
        &out,
        &c.regions(&c.strides),
        true,
    );
    Ok(out)
}

/// `stack(tensors, dim)` into a new tensor: as PyTorch, the inputs joined along `dim` and
/// viewed with the new dimension.
pub(crate) fn stack(ctx: &OpContext, tensors: &[&Tensor], dim: i64) -> Result<Tensor> {
    let op = ctx.op();
    let (shape, d) = check_stack(op, tensors, dim)?;
    let n = shape.len();
    if d < n {
        // As PyTorch: join along `d`, then split `d` into [len, size] with a view, so the
        // result keeps the joined layout (channels-last included).
        let joined = cat(ctx, tensors, d as i64)?;
        let mut sizes = shape.clone();
        sizes.insert(d, tensors.len());
        let jl = joined.layout();
        let strides =
            compute_stride(jl.sizes(), jl.strides(), &sizes).ok_or_else(|| Error::Unsupported {
                op,
                message: "internal: the joined result cannot be viewed as the stack".into(),
            })?;
        return Ok(Tensor::from_parts(
            joined.body().storage,
            Layout::new(sizes, strides, 0),
            joined.dtype(),
            None,
        ));
    }
    // A new last dimension: join the tensors each seen with a trailing size-1 dimension.
    let unsqueezed: Vec<Tensor> = tensors
        .iter()
        .map(|t| {
            let l = t.layout();
            let (mut sizes, mut strides) = (l.sizes().to_vec(), l.strides().to_vec());
            sizes.push(1);
            strides.push(1);
            t.make_view(
                op,
                Layout::new(sizes, strides, l.offset()),
                ViewCreation::Plain,
            )
        })
        .collect();
    let refs: Vec<&Tensor> = unsqueezed.iter().collect();
    cat(ctx, &refs, d as i64)
}
