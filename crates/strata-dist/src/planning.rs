//! A process group for planning on the meta device: rank r of a world of N, whose
//! collectives check their arguments and move nothing (meta tensors have no values), so
//! that one process can run each rank's program and see each rank's memory.

use strata_core::{Device, Error, Result, Tensor};

use crate::group::{check_gather, check_reduction, check_scatter, ProcessGroup, ReduceOp};
use crate::work::Work;

/// Rank `rank` of `world_size`, without communication (see the module docs). Wrapping a
/// meta model in [`DistributedDataParallel`](crate::DistributedDataParallel) with it, or
/// sharding its optimizer with [`ZeroRedundancyOptimizer`](crate::ZeroRedundancyOptimizer),
/// allocates exactly what that rank would: the buckets, the bucket views, its shard.
#[derive(Debug, Clone, Copy)]
pub struct PlanningGroup {
    rank: usize,
    world_size: usize,
}

impl PlanningGroup {
    /// Rank `rank` of `world_size`.
    ///
    /// # Errors
    ///
    /// When `world_size` is 0 or `rank` is not below it.
    pub fn new(rank: usize, world_size: usize) -> Result<Self> {
        if rank >= world_size {
            return Err(Error::argument(
                "PlanningGroup::new",
                format!("rank {rank} is not in a world of {world_size}"),
                Some("pass a rank below the world size, which must be at least 1"),
            ));
        }
        Ok(PlanningGroup { rank, world_size })
    }
}

/// A planned collective changes no memory: meta tensors have no values, and a CPU
/// tensor (a count, a flag) keeps this rank's own.
fn planned(op: &'static str, tensors: &[&Tensor]) -> Result<Work> {
    for t in tensors {
        if t.device() == Device::Meta || t.device() == Device::Cpu {
            continue;
        }
        return Err(Error::Unsupported {
            op,
            message: format!(
                "a planning group plans meta and CPU tensors, not {}",
                t.device()
            ),
        });
    }
    Ok(Work::completed(Ok(())))
}

impl ProcessGroup for PlanningGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> &'static str {
        "planning"
    }

    fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work> {
        check_reduction("all_reduce", op, tensor.dtype())?;
        planned("all_reduce", &[tensor])
    }

    fn broadcast_async(&self, tensor: &Tensor, _root: usize) -> Result<Work> {
        planned("broadcast", &[tensor])
    }

    fn all_gather_into_tensor_async(&self, output: &Tensor, input: &Tensor) -> Result<Work> {
        const OP: &str = "all_gather_into_tensor";
        check_gather(OP, output, input, self.world_size)?;
        planned(OP, &[output, input])
    }

    fn all_gather_async(&self, outputs: &[Tensor], input: &Tensor) -> Result<Work> {
        let mut all: Vec<&Tensor> = outputs.iter().collect();
        all.push(input);
        planned("all_gather", &all)
    }

    fn reduce_scatter_tensor_async(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work> {
        const OP: &str = "reduce_scatter_tensor";
        check_scatter(OP, output, input, op, self.world_size)?;
        planned(OP, &[output, input])
    }

    fn barrier_async(&self) -> Result<Work> {
        Ok(Work::completed(Ok(())))
    }
}
