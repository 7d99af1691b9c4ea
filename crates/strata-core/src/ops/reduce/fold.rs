//! The machinery behind the reductions ([`crate::ops::reduce`]): which dimensions fold, the
//! folds themselves over the element-wise engine, and writing results to a new tensor or an
//! `out=` tensor.
//!
//! Every reduction runs through the engine with an accumulator whose strides are 0 along the
//! reduced dimensions. Floating inputs accumulate in f64 and integers in i64, so sums are
//! careful. The accumulators (one value per result) are temporaries of the op, taken from
//! the device's allocator like any tensor so they are counted and predicted on meta
//! ([`Accumulators`]), finished in place by the backend (a mean's division, a norm's root)
//! and converted once into the destination by a copy: a new contiguous tensor, or an `out=`
//! tensor through its own strides. Nothing here reads device memory.

use crate::backend::kernel::{Fold, FoldCombine};
use crate::backend::{for_device, Backend};
use crate::backend::{Operand, Plan};
use crate::dtype::Element;
use crate::layout::int_arg::IntArg;
use crate::layout::order::{iteration_order, OrderOperand};
use crate::layout::overlap::{internal_overlap, InternalOverlap};
use crate::layout::Layout;
use crate::layout::{contiguous_strides, wrap_dim};
use crate::op::OpContext;
use crate::ops::out::{written, Aliasing, OutDType, OutTarget};
use crate::ops::reduce::accumulators::Accumulators;
use crate::storage::{lock_storages, Access};
use crate::tensor::alloc_for;
use crate::{DType, Device, Error, Result, Tensor};

/// Which dimensions a reduction folds, and the shapes around it.
pub(crate) struct Reduction {
    /// The input's shape.
    shape: Vec<usize>,
    /// True for each reduced dimension.
    pub(crate) mask: Vec<bool>,
    /// The result's shape.
    pub(crate) out_shape: Vec<usize>,
    /// Elements folded into each result.
    pub(crate) count: usize,
    /// The kernels of the input's device.
    backend: &'static dyn Backend,
}

impl Reduction {
    /// The reduction of `x` over `dims` (all when `None` or empty), after checking them.
    pub(crate) fn new<D: IntArg>(
        op: &'static str,
        x: &Tensor,
        dims: Option<&[D]>,
        keepdim: bool,
    ) -> Result<Self> {
        Reduction::for_shape(op, x, x.shape().to_vec(), dims, keepdim)
    }

    /// [`Reduction::new`] for `x` seen with `shape`.
    fn for_shape<D: IntArg>(
        op: &'static str,
        x: &Tensor,
        shape: Vec<usize>,
        dims: Option<&[D]>,
        keepdim: bool,
    ) -> Result<Self> {
        let backend = for_device(x.device())?;
        let n = shape.len();
        let mut mask = vec![dims.is_none_or(|d| d.is_empty()); n];
        let mut seen = Vec::new();
        for d in dims.unwrap_or(&[]).iter().map(|d| d.signed()) {
            let w = wrap_dim(d, n).ok_or(Error::Dim {
                op,
                dim: d,
                ndim: n,
            })?;
            // A 0-d tensor has no dimension to mark, but dim 0 may still appear only once.
            if seen.contains(&w) {
                return Err(Error::argument(
                    op,
                    format!(
                        "dimension {w} appears more than once in {:?}",
                        dims.unwrap_or(&[])
                    ),
                    Some("list each dimension once"),
                ));
            }
            seen.push(w);
            if n > 0 {
                mask[w] = true;
            }
        }
        let out_shape = shape
            .iter()
            .zip(&mask)
            .filter_map(|(&s, &m)| match (m, keepdim) {
                (false, _) => Some(s),
                (true, true) => Some(1),
                (true, false) => None,
            })
            .collect();
        let count = shape
            .iter()
            .zip(&mask)
            .filter(|(_, &m)| m)
            .map(|(&s, _)| s)
            .product();
        Ok(Reduction {
            shape,
            mask,
            out_shape,
            count,
            backend,
        })
    }

    pub(crate) fn refuse_empty(&self, op: &'static str) -> Result<()> {
        if let Some(d) = (0..self.shape.len()).find(|&d| self.mask[d] && self.shape[d] == 0) {
            return Err(Error::shape(
                op,
                format!("cannot reduce over dimension {d}, which has size 0"),
                vec![self.shape.clone()],
            )
            .with_hint(
                "there is no maximum or minimum of nothing; check the tensor is not empty",
            ));
        }
        Ok(())
    }

    /// `len` accumulators set to `init` on `x`'s device, for this reduction's kernels.
    pub(crate) fn accumulators<A: Element>(
        &self,
        ctx: &OpContext,
        x: &Tensor,
        len: usize,
        init: A,
    ) -> Result<Accumulators<A>> {
        Accumulators::new(ctx, self.backend, x.device(), len, init)
    }

    /// Strides of a contiguous accumulator over the kept dimensions, 0 along reduced ones.
    fn acc_strides(&self) -> Vec<usize> {
        let keep: Vec<usize> = self
            .shape
            .iter()
            .zip(&self.mask)
            .map(|(&s, &m)| if m { 1 } else { s })
            .collect();
        contiguous_strides(&keep)
            .into_iter()
            .zip(&self.mask)
            .map(|(st, &m)| if m { 0 } else { st })
            .collect()
    }

    pub(crate) fn out_numel(&self) -> usize {
        self.out_shape.iter().product()
    }

    /// Runs `plan_fn` over a plan with operands `extra` (accumulators) followed by `x` and
    /// `trailing` (read-only buffers), ordered so the reduced dimensions are innermost.
    fn run(
        &self,
        x: &Tensor,
        accs: &mut [(*mut u8, DType)],
        trailing: &[Operand],
        f: impl FnOnce(&Plan),
    ) {
        let body = x.body();
        let acc_strides = self.acc_strides();
        let in_strides = body.layout.strides().to_vec();
        // Walk the input in its own memory order: a run along a reduced dimension folds into
        // one slot, a run along a kept one updates a row of slots; both stream the input.
        let order = [OrderOperand {
            strides: &in_strides,
            is_reduction_output: false,
        }];
        let perm = iteration_order(&self.shape, &order);
        let guards = lock_storages(&[(&body.storage, Access::Read)]);
        let mut operands: Vec<Operand> = accs
            .iter()
            .map(|&(ptr, dtype)| Operand {
                ptr,
                strides: acc_strides.clone(),
                dtype,
            })
            .collect();
        operands.push(Operand {
            ptr: guards
                .read_ptr(&body.storage)
                .wrapping_add(body.layout.offset() * x.element_size()) as *mut u8,
            strides: in_strides.clone(),
            dtype: x.dtype(),
        });
        operands.extend(trailing.iter().cloned());
        let plan = Plan::new(&self.shape, &operands, &perm, false);
        f(&plan);
    }

    /// Folds `x` into one accumulator per result (f64 or i64), starting from `init`, as
    /// `fold` says: `x` read as `compute` (each element rounded to the dtype the op computes
    /// in, then widened to `A`), with `param` the results' parameters (a mean, a maximum)
    /// where the fold's term takes one.
    pub(crate) fn fold_as<A: Element>(
        &self,
        ctx: &OpContext,
        x: &Tensor,
        compute: DType,
        init: A,
        param: Option<&Accumulators<A>>,
        fold: Fold,
    ) -> Result<Accumulators<A>> {
        let acc = self.accumulators(ctx, x, self.out_numel(), init)?;
        if self.shape.contains(&0) {
            return Ok(acc);
        }
        let trailing: Vec<Operand> = param
            .map(|p| p.operand(self.acc_strides()))
            .into_iter()
            .collect();
        let ptr = acc.ptr();
        // SAFETY: the plan is `run`'s: the accumulators are our own buffers of out_numel
        // elements of A addressed by strides that stay inside them, the parameter buffer has
        // the same layout, the input is read-locked, and the plan is sequential.
        self.run(x, &mut [(ptr, A::DTYPE)], &trailing, |plan| unsafe {
            self.backend.fold(plan, compute, A::DTYPE, fold)
        });
        Ok(acc)
    }

    /// Folds `x`'s elements (read in its own dtype) with `combine` from `init`, in
    /// accumulation type `A`.
    pub(crate) fn fold<A: Element>(
        &self,
        ctx: &OpContext,
        x: &Tensor,
        init: A,
        combine: FoldCombine,
    ) -> Result<Accumulators<A>> {
        self.fold_as(ctx, x, x.dtype(), init, None, Fold::of_values(combine))
    }

    /// The steps every reduction shares once its arguments are checked: `out` (when given) is
    /// checked against `x` and resized to the result's shape, `fold` fills one accumulator
    /// per result, and those are written, converted to `dtype`, into a new tensor or `out`.
    pub(crate) fn write_result<A: Element>(
        &self,
        ctx: &OpContext,
        x: &Tensor,
        out: Option<&Tensor>,
        dtype: DType,
        fold: impl FnOnce(&Self) -> Result<Accumulators<A>>,
    ) -> Result<Tensor> {
        let dest = Dest::prepare(ctx, out, &self.out_shape, &[x])?;
        let values = fold(self)?;
        finish(ctx, &values, &self.out_shape, dtype, dest, x.device())
    }

    /// Best value and its position along the single reduced dimension `dim`.
    fn arg_fold<A: Element>(
        &self,
        ctx: &OpContext,
        x: &Tensor,
        dim: usize,
        max: bool,
    ) -> Result<(Accumulators<A>, Accumulators<i64>)> {
        let n = self.out_numel();
        let vals = self.accumulators(ctx, x, n, A::ZERO)?;
        let idx = self.accumulators(ctx, x, n, -1i64)?;
        if self.shape.contains(&0) {
            return Ok((vals, idx));
        }
        let positions = self.accumulators(ctx, x, self.shape[dim], 0i64)?;
        let counting: Vec<u8> = (0..self.shape[dim] as i64)
            .flat_map(i64::to_ne_bytes)
            .collect();
        // SAFETY: the positions are our own `shape[dim]` i64 elements, as many as `counting`
        // holds bytes for.
        unsafe { self.backend.copy_from_host(positions.ptr(), &counting) };
        let mut pos_strides = vec![0usize; self.shape.len()];
        pos_strides[dim] = 1;
        let trailing = [positions.operand(pos_strides)];
        let (vp, ip) = (vals.ptr(), idx.ptr());
        // SAFETY: value and index buffers are ours (out_numel elements each), the positions
        // buffer holds shape[dim] elements read with stride 1 along dim only, the input is
        // read-locked by `run`, and the plan is sequential.
        self.run(
            x,
            &mut [(vp, A::DTYPE), (ip, DType::I64)],
            &trailing,
            |plan| unsafe { self.backend.arg_best(plan, A::DTYPE, max) },
        );
        Ok((vals, idx))
    }
}

/// Where a reduction's result goes.
#[derive(Clone)]
pub(crate) enum Dest {
    /// A new contiguous tensor.
    New,
    /// An `out=` tensor, already checked and given the result's shape.
    Out(Tensor),
}

impl Dest {
    /// The last step of an op's validation: an `out` is checked against `inputs` for a
    /// result of `shape` and then resized to it.
    pub(crate) fn prepare(
        ctx: &OpContext,
        out: Option<&Tensor>,
        shape: &[usize],
        inputs: &[&Tensor],
    ) -> Result<Dest> {
        let target = out
            .map(|o| OutTarget::check(ctx.op(), o, shape, OutDType::Any, inputs, Aliasing::Exact))
            .transpose()?;
        Dest::resize(ctx, target)
    }

    /// A checked `out=` target resized to the result's shape, or a new tensor without one.
    pub(crate) fn resize(ctx: &OpContext, target: Option<OutTarget>) -> Result<Dest> {
        Ok(match target {
            None => Dest::New,
            Some(t) => Dest::Out(t.resize(ctx)?),
        })
    }
}

/// Writes `values` (row-major over `out`'s shape) into `out` through its strides, converted
/// to its dtype.
fn write_values<A: Element>(values: &Accumulators<A>, out: &Tensor) -> Result<()> {
    let backend = for_device(out.device())?;
    let ob = out.body();
    let l = &ob.layout;
    if l.numel() == 0 || values.len() != l.numel() {
        return Ok(());
    }
    let src_strides = contiguous_strides(l.sizes());
    let perm = iteration_order(
        l.sizes(),
        &[
            OrderOperand {
                strides: l.strides(),
                is_reduction_output: false,
            },
            OrderOperand {
                strides: &src_strides,
                is_reduction_output: false,
            },
        ],
    );
    let guards = lock_storages(&[(&ob.storage, Access::Write)]);
    let operands = [
        Operand {
            ptr: guards
                .write_ptr(&ob.storage)
                .wrapping_add(l.offset() * out.element_size()),
            strides: l.strides().to_vec(),
            dtype: out.dtype(),
        },
        values.operand(src_strides),
    ];
    let parallel = internal_overlap(l) == InternalOverlap::No;
    let plan = Plan::new(l.sizes(), &operands, &perm, parallel);
    // SAFETY: the output's storage is write-locked and its layout lies within it; `values`
    // holds one element per output element, read with contiguous strides. Parallel only when
    // every output element is written once; the values buffer is ours.
    unsafe { backend.copy(&plan) };
    Ok(())
}

/// The result from accumulated values: a new contiguous tensor of `shape` and `dtype` on
/// `device` (the input's), or
/// the `out=` tensor written in place (its version bumped once).
pub(crate) fn finish<A: Element>(
    ctx: &OpContext,
    values: &Accumulators<A>,
    shape: &[usize],
    dtype: DType,
    dest: Dest,
    device: Device,
) -> Result<Tensor> {
    match dest {
        Dest::New => {
            let backend = for_device(device)?;
            let layout = Layout::contiguous(shape, 0);
            let storage = alloc_for(ctx, &layout, dtype, device)?;
            let n = layout.numel();
            if n > 0 && values.len() == n {
                let guards = lock_storages(&[(&*storage, Access::Write)]);
                let operands = [
                    (guards.write_ptr(&storage), dtype),
                    (values.ptr(), A::DTYPE),
                ];
                let plan = Plan::linear(n, &operands, true);
                // SAFETY: the new storage holds `n` elements of `dtype` and is write-locked;
                // the accumulators are our own `n` elements of A, apart from it.
                unsafe { backend.copy(&plan) };
            }
            Ok(Tensor::from_parts(storage, layout, dtype, None))
        }
        Dest::Out(out) => {
            write_values(values, &out)?;
            Ok(written(ctx.op(), &out))
        }
    }
}

pub(crate) fn floating_only(op: &'static str, x: &Tensor) -> Result<()> {
    if x.dtype().is_floating() {
        Ok(())
    } else {
        Err(Error::dtype(
            op,
            format!("{op} needs a floating tensor, got {}", x.dtype()),
            Some("convert first with .to(DType::F32)"),
        ))
    }
}

pub(crate) fn sum_dtype(d: DType) -> DType {
    if d.is_floating() {
        d
    } else {
        DType::I64
    }
}

/// A validated reduction to a best element along one dimension (`max`/`min` with a dim,
/// `argmax`/`argmin`): the input, whether it is folded flattened (a reduction over
/// everything, or a 0-d input seen as `[1]`), the reduction, and its dimension.
pub(crate) struct ArgReduction {
    x: Tensor,
    flatten: bool,
    r: Reduction,
    d: usize,
}

impl ArgReduction {
    /// Validates `dim` (`None`: over all elements, as `argmax` without a dim) for `x`.
    /// Nothing is read or allocated yet.
    pub(crate) fn new(
        op: &'static str,
        x: &Tensor,
        dim: Option<i64>,
        keepdim: bool,
    ) -> Result<Self> {
        let n = x.dim();
        let flat = vec![x.numel()];
        let (flatten, r) = match dim {
            Some(dim) => {
                let d = wrap_dim(dim, n).ok_or(Error::Dim { op, dim, ndim: n })?;
                if n == 0 {
                    (
                        true,
                        Reduction::for_shape(op, x, flat, Some(&[0usize]), false)?,
                    )
                } else {
                    (false, Reduction::new(op, x, Some(&[d]), keepdim)?)
                }
            }
            None => {
                let mut r = Reduction::for_shape(op, x, flat, Some(&[0usize]), false)?;
                if keepdim {
                    r.out_shape = vec![1; n];
                }
                (true, r)
            }
        };
        r.refuse_empty(op)?;
        let d = r.mask.iter().position(|&m| m).unwrap_or(0);
        Ok(ArgReduction {
            x: x.clone(),
            flatten,
            r,
            d,
        })
    }

    /// The result's shape.
    pub(crate) fn out_shape(&self) -> &[usize] {
        &self.r.out_shape
    }

    /// The tensor folded: the input, or its flattening, which is a view unless the input is
    /// not contiguous (then a copy, as PyTorch's `reshape(-1)` makes).
    pub(crate) fn input(&self) -> Result<Tensor> {
        if self.flatten {
            self.x.reshape(&[-1])
        } else {
            Ok(self.x.clone())
        }
    }

    /// The best values and their positions in `x` (from [`ArgReduction::input`]); writes the
    /// values (in the input's dtype) to `values` unless it is `None`, and the positions (i64)
    /// to `indices`.
    pub(crate) fn run(
        &self,
        ctx: &OpContext,
        x: &Tensor,
        max: bool,
        values: Option<Dest>,
        indices: Dest,
    ) -> Result<(Option<Tensor>, Tensor)> {
        let (r, d) = (&self.r, self.d);
        let shape = &r.out_shape;
        let (v, i) = if x.dtype().is_floating() {
            let (v, i) = r.arg_fold::<f64>(ctx, x, d, max)?;
            let v = values
                .map(|dest| finish(ctx, &v, shape, x.dtype(), dest, x.device()))
                .transpose()?;
            (v, i)
        } else {
            let (v, i) = r.arg_fold::<i64>(ctx, x, d, max)?;
            let v = values
                .map(|dest| finish(ctx, &v, shape, x.dtype(), dest, x.device()))
                .transpose()?;
            (v, i)
        };
        Ok((v, finish(ctx, &i, shape, DType::I64, indices, x.device())?))
    }
}

/// Running sums of `x` along `d` written into `out` (same shape), read as `dtype` and
/// accumulated in f64 or i64.
pub(crate) fn scan_sum(
    ctx: &OpContext,
    backend: &'static dyn Backend,
    x: &Tensor,
    out: &Tensor,
    d: usize,
    dtype: DType,
) -> Result<()> {
    let (xb, ob) = (x.body(), out.body());
    let shape = xb.layout.sizes().to_vec();
    let mut line = shape.clone();
    if let Some(s) = line.get_mut(d) {
        *s = 1;
    }
    let mut carry_strides = contiguous_strides(&line);
    if let Some(s) = carry_strides.get_mut(d) {
        *s = 0;
    }
    let lines: usize = line.iter().product();
    let (mut carry_f, mut carry_i) = (None, None);
    let carry = if dtype.is_floating() {
        let c = carry_f.insert(Accumulators::new(ctx, backend, x.device(), lines, 0f64)?);
        (c.ptr(), DType::F64)
    } else {
        let c = carry_i.insert(Accumulators::new(ctx, backend, x.device(), lines, 0i64)?);
        (c.ptr(), DType::I64)
    };
    // Memory order. A sequential walk visits the elements of every line in increasing
    // position along `d` whatever the order, and the carry's stride 0 along `d` keeps it
    // from being coalesced with another dimension.
    let perm = iteration_order(
        &shape,
        &[
            OrderOperand {
                strides: ob.layout.strides(),
                is_reduction_output: false,
            },
            OrderOperand {
                strides: xb.layout.strides(),
                is_reduction_output: false,
            },
        ],
    );
    let guards = lock_storages(&[(&ob.storage, Access::Write), (&xb.storage, Access::Read)]);
    let operands = [
        Operand {
            ptr: guards
                .write_ptr(&ob.storage)
                .wrapping_add(ob.layout.offset() * out.element_size()),
            strides: ob.layout.strides().to_vec(),
            dtype: out.dtype(),
        },
        Operand {
            ptr: carry.0,
            strides: carry_strides,
            dtype: carry.1,
        },
        Operand {
            ptr: guards
                .read_ptr(&xb.storage)
                .wrapping_add(xb.layout.offset() * x.element_size()) as *mut u8,
            strides: xb.layout.strides().to_vec(),
            dtype: x.dtype(),
        },
    ];
    let plan = Plan::new(&shape, &operands, &perm, false);
    // SAFETY: the locks are held; the carry buffer is ours, one slot per line (stride 0
    // along the scanned dimension), of the accumulation type the backend uses for `dtype`;
    // the plan is sequential.
    unsafe { backend.scan_sum(&plan, dtype) };
    drop(guards);
    drop((carry_f, carry_i));
    Ok(())
}
