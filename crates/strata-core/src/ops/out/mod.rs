//! What every `out=` op shares: checking the output's dtype and memory before anything is
//! written, and resizing it as PyTorch's `resize_output` does.
//!
//! An `out=` op validates everything first (its own arguments, then the output with a dtype
//! rule and [`check_memory`]: [`OutTarget::check`]), then resizes the output
//! ([`OutTarget::resize`]), then writes it through the same kernel as the out-of-place op and
//! bumps its version once ([`written`]).
//! An output that already has the result's shape keeps its strides and is written where it
//! is; one of another shape becomes contiguous at its storage offset (its storage grows when
//! too small, with a warning when it held elements).

use crate::layout::overlap::{internal_overlap, overlap, InternalOverlap, Overlap};
use crate::layout::Layout;
use crate::op::OpContext;
use crate::{DType, Error, Result, Tensor};

/// The dtype an `out=` form requires of its output.
#[derive(Debug, Clone, Copy)]
pub(crate) enum OutDType {
    /// Exactly the result's dtype (see [`expect_dtype`]).
    Exact(DType),
    /// Any dtype the result's converts to (see [`check_cast`]).
    CastFrom(DType),
    /// Whatever the output has: the op computes in it.
    Any,
}

impl OutDType {
    /// Checks `out`'s dtype against this rule.
    pub(crate) fn check(self, op: &'static str, out: &Tensor) -> Result<()> {
        match self {
            OutDType::Exact(dtype) => expect_dtype(op, out, dtype),
            OutDType::CastFrom(dtype) => check_cast(op, dtype, out.dtype()),
            OutDType::Any => Ok(()),
        }
    }
}

/// An `out=` tensor checked to receive a result: the one preparation every `out=` form goes
/// through (element-wise, matrix products, reductions, indexed, joining, softmax).
/// [`OutTarget::check`] decides from dtypes and layouts alone and changes nothing;
/// [`OutTarget::resize`] is where the output starts to change; the op then writes it and
/// returns [`written`].
#[derive(Debug)]
pub(crate) struct OutTarget {
    out: Tensor,
    shape: Vec<usize>,
}

impl OutTarget {
    /// Checks that `out` may receive a result of `shape` read from `inputs`: its dtype by
    /// `dtype`, its memory as `aliasing` allows (see [`check_memory`]).
    pub(crate) fn check(
        op: &'static str,
        out: &Tensor,
        shape: &[usize],
        dtype: OutDType,
        inputs: &[&Tensor],
        aliasing: Aliasing,
    ) -> Result<OutTarget> {
        dtype.check(op, out)?;
        check_memory(op, out, shape, inputs, aliasing)?;
        Ok(OutTarget {
            out: out.clone(),
            shape: shape.to_vec(),
        })
    }

    /// The shape the output receives.
    pub(crate) fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// The output's dtype.
    pub(crate) fn dtype(&self) -> DType {
        self.out.dtype()
    }

    /// Whether the output already has the result's shape (it is then written where it is).
    pub(crate) fn keeps_shape(&self) -> bool {
        self.out.layout().sizes() == self.shape.as_slice()
    }

    /// Also checks the output's memory against `inputs` under another `aliasing` rule.
    pub(crate) fn and_inputs(
        self,
        op: &'static str,
        inputs: &[&Tensor],
        aliasing: Aliasing,
    ) -> Result<OutTarget> {
        check_memory(op, &self.out, &self.shape, inputs, aliasing)?;
        Ok(self)
    }

    /// Gives the output the result's shape ([`Tensor::resize_for_out`]: kept when it has it,
    /// else contiguous) and returns it, ready to be written.
    pub(crate) fn resize(self, ctx: &OpContext) -> Result<Tensor> {
        self.out.resize_for_out(ctx, &self.shape)?;
        Ok(self.out)
    }

    /// [`OutTarget::resize`] to the dense `strides` when the shape changes.
    pub(crate) fn resize_strided(self, ctx: &OpContext, strides: Vec<usize>) -> Result<Tensor> {
        self.out.resize_for_out_strided(ctx, &self.shape, strides)?;
        Ok(self.out)
    }
}

/// Counts `op`'s one write to `out` (its version goes up by one) and returns it.
pub(crate) fn written(op: &'static str, out: &Tensor) -> Tensor {
    out.bump_version(op);
    out.clone()
}

/// The error for a result that the destination's dtype cannot hold (an in-place op, or an
/// `out=` that converts).
pub(crate) fn check_cast(op: &'static str, result: DType, dest: DType) -> Result<()> {
    if result.can_cast_to(dest) {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!(
            "the result has dtype {result}, which cannot be stored in a tensor of dtype {dest}"
        ),
        Some("use the out-of-place op, or convert the destination first with .to(dtype)"),
    ))
}

/// How much an output may share with an input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Aliasing {
    /// The output may be an input exactly (the same elements at the same positions), as for
    /// element-wise ops; a partial overlap is refused.
    Exact,
    /// The output may share no memory with any input (PyTorch's `assert_no_overlap`).
    Disjoint,
    /// The output may share memory with the inputs in any way: the op writes through a
    /// private buffer when it does (the matrix products). As PyTorch's products, only an
    /// output written where it is must not be self-overlapping; one that is resized may be.
    Buffered,
}

/// The error for an `out` whose dtype is not exactly the result's, for the ops where
/// PyTorch requires that ("Expected out tensor to have dtype ...").
pub(crate) fn expect_dtype(op: &'static str, out: &Tensor, expected: DType) -> Result<()> {
    if out.dtype() == expected {
        return Ok(());
    }
    Err(Error::dtype(
        op,
        format!(
            "the result has dtype {expected} but the output has dtype {}; this op does not \
             convert its result",
            out.dtype()
        ),
        None,
    )
    .with_hint(format!(
        "pass an output of dtype {expected}, or use the out-of-place op and convert the result \
         with .to(DType::{expected:?})"
    )))
}

/// The layout `out` is written through for a result of `shape`: its own when it already has
/// that shape, else contiguous at its current offset (what the resize gives it).
fn written_layout(out: &Tensor, shape: &[usize]) -> Layout {
    let l = out.layout();
    if l.sizes() == shape {
        l
    } else {
        Layout::contiguous(shape, l.offset())
    }
}

fn overlap_error(op: &'static str, message: &str) -> Error {
    Error::Overlap {
        op,
        message: message.into(),
        hint: Some(
            "pass a fresh output tensor, or deep_clone() the input that shares its memory".into(),
        ),
    }
}

/// Checks that `out` may receive a result of `shape` read from `inputs`: no element of `out`
/// may share a memory location with another (an expanded output), and it may share memory
/// with an input only as `aliasing` allows, as it is and as it will be written (after the
/// resize). An output that is an input exactly may not be resized. Decides from layouts
/// alone, writing nothing.
pub(crate) fn check_memory(
    op: &'static str,
    out: &Tensor,
    shape: &[usize],
    inputs: &[&Tensor],
    aliasing: Aliasing,
) -> Result<()> {
    let ob = out.body();
    let resized = ob.layout.sizes() != shape;
    let self_overlap_checked = !(resized && aliasing == Aliasing::Buffered);
    if self_overlap_checked && internal_overlap(&ob.layout) == InternalOverlap::Yes {
        return Err(overlap_error(
            op,
            &format!(
                "the output of shape {:?} has strides {:?}: more than one of its elements \
                 refers to the same memory location",
                ob.layout.sizes(),
                ob.layout.strides()
            ),
        ));
    }
    if aliasing == Aliasing::Buffered {
        return Ok(());
    }
    let written = written_layout(out, shape);
    for input in inputs {
        let ib = input.body();
        if ib.storage.id() != ob.storage.id() {
            continue;
        }
        for (l, current) in [(&ob.layout, true), (&written, false)] {
            match (overlap(l, &ib.layout), aliasing) {
                (Overlap::Partial, _) | (Overlap::Full, Aliasing::Disjoint) => {
                    return Err(overlap_error(
                        op,
                        "the output shares memory with an input: some of their elements refer \
                         to the same memory location at different positions",
                    ))
                }
                (Overlap::Full, Aliasing::Exact) if resized && current => {
                    return Err(overlap_error(
                        op,
                        "the output shares memory with an input and would have to be resized",
                    ))
                }
                _ => {}
            }
        }
    }
    Ok(())
}

/// Refuses two outputs of one op (values and indices) that share memory.
pub(crate) fn check_distinct_outputs(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.storage_id() == b.storage_id() {
        return Err(overlap_error(
            op,
            "the two outputs share memory; each needs its own",
        ));
    }
    Ok(())
}

/// Checks shared by the tests of the `out=` forms.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use strata_alloc::{DeviceAllocator, HostAllocator};

    use crate::{with_allocator, DType, Error, Result, Tensor};

    /// Runs `f` with a fresh allocator routed in, returning its result and the most bytes that
    /// allocator held at once (0 when `f` allocated nothing).
    pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
        let a: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
        let r = with_allocator(&a, f);
        (r, a.max_memory_allocated())
    }

    fn assert_values(got: &Tensor, want: &Tensor, tol: f64, what: &str) {
        let (g, w) = (got.to_vec::<f64>().unwrap(), want.to_vec::<f64>().unwrap());
        assert_eq!(g.len(), w.len(), "{what}: element counts");
        for (k, (a, b)) in g.iter().zip(&w).enumerate() {
            let same =
                (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * b.abs().max(1.0);
            assert!(same, "{what}: element {k} is {a}, expected {b}");
        }
    }

    /// Checks an `out=` form (`run` writes into the output it is given) against `want`, the
    /// out-of-place result, for outputs of `want`'s dtype: an output of the right shape is
    /// written where it is with nothing allocated, is the tensor returned and counts one
    /// write; a transposed one keeps its strides; an empty one is resized (contiguous).
    /// Values must match to `tol` (relative; 0 for the same bits).
    pub(crate) fn check_out_form(want: &Tensor, tol: f64, run: impl Fn(&Tensor) -> Result<Tensor>) {
        check_out_form_with_scratch(want, tol, 0, run);
    }

    /// [`check_out_form`] for an op that works in up to `scratch` bytes of temporaries (a
    /// reduction's accumulators), all returned before it finishes.
    pub(crate) fn check_out_form_with_scratch(
        want: &Tensor,
        tol: f64,
        scratch: usize,
        run: impl Fn(&Tensor) -> Result<Tensor>,
    ) {
        let (shape, dtype) = (want.shape(), want.dtype());
        let out = Tensor::full(&shape, 7, dtype).unwrap();
        let (id, ptr) = (out.storage_id(), out.data_ptr());
        let (r, peak) = peak_during(|| run(&out));
        let r = r.unwrap();
        assert!(r.is_same(&out), "the output itself is returned");
        assert!(
            peak <= scratch,
            "an output of the right shape is written in place, with at most {scratch} bytes \
             of working memory (used {peak})"
        );
        assert_eq!((out.storage_id(), out.data_ptr()), (id, ptr));
        assert_eq!(out.version(), 1, "one write");
        assert_values(&out, want, tol, "right-shaped output");

        if shape.len() >= 2 {
            let reversed: Vec<usize> = shape.iter().rev().copied().collect();
            let perm: Vec<i64> = (0..shape.len() as i64).rev().collect();
            let t = Tensor::zeros(&reversed, dtype)
                .unwrap()
                .permute(&perm)
                .unwrap();
            let strides = t.stride();
            run(&t).unwrap();
            assert_eq!(
                t.stride(),
                strides,
                "a right-shaped output keeps its strides"
            );
            assert_eq!(t.version(), 1);
            assert_values(&t, want, tol, "transposed output");
        }

        let empty = Tensor::zeros(&[0], dtype).unwrap();
        let r = run(&empty).unwrap();
        assert!(r.is_same(&empty));
        assert_eq!(empty.shape(), shape, "an empty output is resized");
        assert!(empty.is_contiguous(), "a resized output is contiguous");
        assert_eq!(empty.version(), 1);
        assert_values(&empty, want, tol, "resized output");
    }

    /// Checks that `run` refuses an output of `shape` and dtype `bad` with a dtype error and
    /// leaves it exactly as it was.
    pub(crate) fn check_dtype_refused(
        shape: &[usize],
        bad: DType,
        run: impl Fn(&Tensor) -> Result<Tensor>,
    ) {
        let out = Tensor::full(shape, 3, bad).unwrap();
        let before = (
            out.shape(),
            out.stride(),
            out.data_ptr(),
            out.to_vec::<f64>().unwrap(),
        );
        let err = run(&out).unwrap_err();
        assert!(matches!(err, Error::DType { .. }), "{err}");
        let after = (
            out.shape(),
            out.stride(),
            out.data_ptr(),
            out.to_vec::<f64>().unwrap(),
        );
        assert_eq!(before, after, "a refused output is untouched");
        assert_eq!(out.version(), 0);
    }
}

#[cfg(test)]
mod tests;
