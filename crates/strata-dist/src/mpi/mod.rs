//! The MPI process group (feature `mpi`): collectives on CPU tensors in place, run by one
//! communication thread per process.

mod ffi;
mod thread;

use std::sync::Arc;

use strata_core::{Result, Tensor};

use crate::group::{
    check_gather, check_reduction, check_same_dtype, check_scatter, ProcessGroup, ReduceOp,
};
use crate::work::Work;
use thread::CommThread;

/// A process group over every rank `mpirun` started (MPI's world communicator).
///
/// Create it once, at the start of the program, with [`init_process_group`], and let it drop
/// at the end: dropping it finishes the queued collectives and finalises MPI (a rank that
/// exits without finalising makes `mpirun` report the job as failed).
pub struct MpiProcessGroup {
    rank: usize,
    world_size: usize,
    thread: CommThread,
}

/// Initialises MPI and returns the group of every rank of the job. Rank and world size come
/// from the launcher (`mpirun -np N`); a program started without one is a group of one.
///
/// # Errors
///
/// When MPI was already initialised in this process (a second call), when the library
/// cannot run collectives on a thread of their own, or when its initialisation fails.
pub fn init_process_group() -> Result<Arc<MpiProcessGroup>> {
    let (thread, membership) = CommThread::start()?;
    Ok(Arc::new(MpiProcessGroup {
        rank: membership.rank,
        world_size: membership.world_size,
        thread,
    }))
}

/// Checks that `t` can be used in place by a collective: on the CPU and contiguous.
fn check_buffer(op: &'static str, what: &str, t: &Tensor) -> Result<()> {
    if t.device() != strata_core::Device::Cpu {
        return Err(strata_core::Error::Unsupported {
            op,
            message: format!(
                "{what} is on {}; this process group moves CPU tensors. Hint: copy it with \
                 .to(Device::Cpu), or use a process group for that device",
                t.device()
            ),
        });
    }
    if !t.is_contiguous() {
        return Err(strata_core::Error::argument(
            op,
            format!(
                "{what} is not contiguous (shape {:?}, strides {:?}); collectives work on one \
                 run of memory in place",
                t.shape().to_vec(),
                t.stride()
            ),
            Some("call .contiguous() and pass the copy (then copy the result back if needed)"),
        ));
    }
    Ok(())
}

/// Runs `f` on `read`'s bytes and `write`'s bytes, locking the two storages in increasing id
/// order (as ops lock theirs), so two threads cannot each hold one and wait for the other.
fn with_read_and_write<R>(
    op: &'static str,
    read: &Tensor,
    write: &Tensor,
    f: impl FnOnce(&[u8], &mut [u8]) -> R,
) -> Result<R> {
    if read.storage_id() == write.storage_id() {
        return Err(strata_core::Error::argument(
            op,
            "the input and the output share memory",
            Some("pass an output of its own"),
        ));
    }
    if read.storage_id() < write.storage_id() {
        read.with_host_bytes(op, |r| write.with_host_bytes_mut(op, |w| f(r, w)))?
    } else {
        write.with_host_bytes_mut(op, |w| read.with_host_bytes(op, |r| f(r, w)))?
    }
}

impl ProcessGroup for MpiProcessGroup {
    fn rank(&self) -> usize {
        self.rank
    }

    fn world_size(&self) -> usize {
        self.world_size
    }

    fn backend(&self) -> &'static str {
        "mpi"
    }

    fn all_reduce_async(&self, tensor: &Tensor, op: ReduceOp) -> Result<Work> {
        const OP: &str = "all_reduce";
        check_buffer(OP, "the tensor", tensor)?;
        check_reduction(OP, op, tensor.dtype())?;
        ffi::checked_reduction_type(OP, tensor.dtype())?;
        let (t, world) = (tensor.clone(), self.world_size);
        self.thread.submit(OP, move || {
            let dtype = t.dtype();
            t.with_host_bytes_mut(OP, |bytes| {
                ffi::all_reduce(OP, bytes, dtype, op)?;
                if op == ReduceOp::Average {
                    divide(bytes, dtype, world);
                }
                Ok(())
            })?
        })
    }

    fn broadcast_async(&self, tensor: &Tensor, root: usize) -> Result<Work> {
        const OP: &str = "broadcast";
        check_buffer(OP, "the tensor", tensor)?;
        self.check_rank(OP, root)?;
        let t = tensor.clone();
        self.thread.submit(OP, move || {
            t.with_host_bytes_mut(OP, |bytes| ffi::broadcast(OP, bytes, root))??;
            Ok(())
        })
    }

    fn all_gather_into_tensor_async(&self, output: &Tensor, input: &Tensor) -> Result<Work> {
        const OP: &str = "all_gather_into_tensor";
        check_buffer(OP, "the input", input)?;
        check_buffer(OP, "the output", output)?;
        check_gather(OP, output, input, self.world_size)?;
        let (input, output) = (input.clone(), output.clone());
        self.thread.submit(OP, move || {
            with_read_and_write(OP, &input, &output, |part, all| {
                ffi::all_gather(OP, part, all)
            })??;
            Ok(())
        })
    }

    fn all_gather_async(&self, outputs: &[Tensor], input: &Tensor) -> Result<Work> {
        const OP: &str = "all_gather";
        check_buffer(OP, "the input", input)?;
        if outputs.len() != self.world_size {
            return Err(strata_core::Error::argument(
                OP,
                format!(
                    "{} outputs for {} ranks; all_gather needs one per rank",
                    outputs.len(),
                    self.world_size
                ),
                None,
            ));
        }
        for o in outputs {
            check_same_dtype(OP, input, o)?;
            if o.numel() != input.numel() {
                return Err(strata_core::Error::shape(
                    OP,
                    "every output must have the input's element count",
                    vec![o.shape().to_vec(), input.shape().to_vec()],
                ));
            }
        }
        let (input, outputs) = (input.clone(), outputs.to_vec());
        let world = self.world_size;
        self.thread.submit(OP, move || {
            let n = input.numel();
            let staging = Tensor::empty(&[world * n], input.dtype())?;
            with_read_and_write(OP, &input, &staging, |part, all| {
                ffi::all_gather(OP, part, all)
            })??;
            for (r, o) in outputs.iter().enumerate() {
                let part = staging.narrow(0, r * n, n)?.view(&o.shape())?;
                o.copy_(&part)?;
            }
            Ok(())
        })
    }

    fn reduce_scatter_tensor_async(
        &self,
        output: &Tensor,
        input: &Tensor,
        op: ReduceOp,
    ) -> Result<Work> {
        const OP: &str = "reduce_scatter_tensor";
        check_buffer(OP, "the input", input)?;
        check_buffer(OP, "the output", output)?;
        check_scatter(OP, output, input, op, self.world_size)?;
        ffi::checked_reduction_type(OP, input.dtype())?;
        let (input, output, world) = (input.clone(), output.clone(), self.world_size);
        self.thread.submit(OP, move || {
            let dtype = input.dtype();
            with_read_and_write(OP, &input, &output, |whole, share| {
                ffi::reduce_scatter(OP, whole, share, dtype, op)?;
                if op == ReduceOp::Average {
                    divide(share, dtype, world);
                }
                Ok::<(), crate::error::DistError>(())
            })??;
            Ok(())
        })
    }

    fn barrier_async(&self) -> Result<Work> {
        const OP: &str = "barrier";
        self.thread.submit(OP, move || Ok(ffi::barrier(OP)?))
    }
}

impl MpiProcessGroup {
    /// Ends every rank of the job at once with exit code `code` (`MPI_Abort`): what a rank
    /// that cannot go on must do, since returning would leave the other ranks waiting in
    /// their next collective for it. Prints nothing; say why before calling it.
    pub fn abort(&self, code: i32) -> ! {
        ffi::abort(code);
        std::process::exit(code)
    }

    fn check_rank(&self, op: &'static str, rank: usize) -> Result<()> {
        if rank >= self.world_size {
            return Err(strata_core::Error::argument(
                op,
                format!("rank {rank} is not in a group of {}", self.world_size),
                Some("pass a rank below the world size"),
            ));
        }
        Ok(())
    }
}

/// Divides elements of a floating `dtype` by `world` in place (the averages' last step; the
/// 16-bit floats never get here, MPI cannot reduce them).
fn divide(bytes: &mut [u8], dtype: strata_core::DType, world: usize) {
    match dtype {
        strata_core::DType::F32 => {
            for c in bytes.chunks_exact_mut(4) {
                let v = f32::from_ne_bytes([c[0], c[1], c[2], c[3]]) / world as f32;
                c.copy_from_slice(&v.to_ne_bytes());
            }
        }
        strata_core::DType::F64 => {
            for c in bytes.chunks_exact_mut(8) {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                let v = f64::from_ne_bytes(a) / world as f64;
                c.copy_from_slice(&v.to_ne_bytes());
            }
        }
        _ => {}
    }
}
