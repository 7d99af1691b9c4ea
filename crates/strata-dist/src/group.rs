//! The process-group interface (c10d's `ProcessGroup`): collectives over the tensors of every
//! rank, each in a blocking form and an asynchronous one that returns a [`Work`]. MPI
//! implements it here; NCCL can implement it beside the CUDA backend.

use strata_core::{DType, Error, Result, Tensor};

use crate::work::Work;

/// How a reduction combines the ranks' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReduceOp {
    /// The element-wise sum (a logical or for `bool`).
    Sum,
    /// The element-wise sum divided by the world size: floating dtypes only.
    Average,
    /// The element-wise maximum (a logical or for `bool`).
    Max,
}

/// A group of processes (ranks) that run collectives together. Every rank must call the
/// same collectives in the same order with tensors of the same shapes and dtypes. Tensors
/// are used in place: they must be contiguous CPU tensors, and each stays locked (as if an
/// op were writing it) until its collective has finished.
pub trait ProcessGroup: Send + Sync {
    /// This process's rank, from 0.
    fn rank(&self) -> usize;

    /// How many ranks the group has.
    fn world_size(&self) -> usize;

    /// The name of the library underneath (`"mpi"`).
    fn backend(&self) -> &'static str;

    /// Starts reducing `tensor` over every rank with `op`, leaving the result in `tensor` on
    /// every rank.
    fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work>;

    /// Starts copying rank `root`'s `tensor` into every other rank's `tensor`.
    fn broadcast_async(&self, tensor: &Tensor, root: usize) -> Result<Work>;

    /// Starts gathering every rank's `input` into `output`, rank r's at elements
    /// `r * n .. (r + 1) * n` (`n` = `input`'s element count; PyTorch's
    /// `all_gather_into_tensor`).
    fn all_gather_into_tensor_async(&self, output: &Tensor, input: &Tensor) -> Result<Work>;

    /// Starts gathering every rank's `input` into `outputs[r]` (PyTorch's `all_gather`):
    /// through one staging buffer the size of all of them, then copied out.
    fn all_gather_async(&self, outputs: &[Tensor], input: &Tensor) -> Result<Work>;

    /// Starts reducing every rank's `input` with `op` and leaving the rank-r part of the
    /// result (elements `r * n .. (r + 1) * n`, `n` = `output`'s element count) in rank r's
    /// `output` (PyTorch's `reduce_scatter_tensor`).
    fn reduce_scatter_tensor_async(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work>;

    /// Starts a barrier: it completes once every rank has started it.
    fn barrier_async(&self) -> Result<Work>;

    /// [`all_reduce_async`](Self::all_reduce_async), waited for.
    fn all_reduce(&self, tensor: &Tensor, op: ReduceOp) -> Result<()> {
        self.all_reduce_async(tensor, op)?.wait()
    }

    /// [`broadcast_async`](Self::broadcast_async), waited for.
    fn broadcast(&self, tensor: &Tensor, root: usize) -> Result<()> {
        self.broadcast_async(tensor, root)?.wait()
    }

    /// [`all_gather_into_tensor_async`](Self::all_gather_into_tensor_async), waited for.
    fn all_gather_into_tensor(&self, output: &Tensor, input: &Tensor) -> Result<()> {
        self.all_gather_into_tensor_async(output, input)?.wait()
    }

    /// [`all_gather_async`](Self::all_gather_async), waited for.
    fn all_gather(&self, outputs: &[Tensor], input: &Tensor) -> Result<()> {
        self.all_gather_async(outputs, input)?.wait()
    }

    /// [`reduce_scatter_tensor_async`](Self::reduce_scatter_tensor_async), waited for.
    fn reduce_scatter_tensor(&self, output: &Tensor, input: &Tensor, op: ReduceOp) -> Result<()> {
        self.reduce_scatter_tensor_async(output, input, op)?.wait()
    }

    /// [`barrier_async`](Self::barrier_async), waited for.
    fn barrier(&self) -> Result<()> {
        self.barrier_async()?.wait()
    }
}

/// Checks that a reduction `op` is defined for `dtype`.
pub(crate) fn check_reduction(op_name: &'static str, op: ReduceOp, dtype: DType) -> Result<()> {
    if op == ReduceOp::Average && !dtype.is_floating() {
        return Err(Error::dtype(
            op_name,
            format!("ReduceOp::Average needs a floating dtype, the tensor is {dtype}"),
            Some("use ReduceOp::Sum and divide as the program means to"),
        ));
    }
    Ok(())
}

/// Checks that two tensors a collective pairs up have the same dtype.
pub(crate) fn check_same_dtype(op: &'static str, a: &Tensor, b: &Tensor) -> Result<()> {
    if a.dtype() != b.dtype() {
        return Err(Error::dtype(
            op,
            format!(
                "the input is {} but the output is {}; a collective does not convert",
                a.dtype(),
                b.dtype()
            ),
            Some("convert one with .to(dtype) first"),
        ));
    }
    Ok(())
}

/// Checks that `output` holds `world` times `input`'s elements.
fn check_gathered_size(
    op: &'static str,
    gathered: &Tensor,
    part: &Tensor,
    world: usize,
) -> Result<()> {
    if gathered.numel() != part.numel() * world {
        return Err(Error::shape(
            op,
            format!(
                "the gathered tensor has {} elements but {world} ranks of {} elements make {}",
                gathered.numel(),
                part.numel(),
                part.numel() * world
            ),
            vec![gathered.shape().to_vec(), part.shape().to_vec()],
        ));
    }
    Ok(())
}

/// The checks every all-gather makes: one dtype, and `output` world times `input`.
pub(crate) fn check_gather(
    op: &'static str,
    output: &Tensor,
    input: &Tensor,
    world: usize,
) -> Result<()> {
    check_same_dtype(op, input, output)?;
    check_gathered_size(op, output, input, world)
}

/// The checks every reduce-scatter makes: one dtype, a reduction defined for it, and
/// `input` world times `output`.
pub(crate) fn check_scatter(
    op: &'static str,
    output: &Tensor,
    input: &Tensor,
    reduce: ReduceOp,
    world: usize,
) -> Result<()> {
    check_same_dtype(op, input, output)?;
    check_reduction(op, reduce, input.dtype())?;
    check_gathered_size(op, input, output, world)
}
