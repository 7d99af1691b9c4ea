//! Walking the runs of an element-wise [`Plan`] on the CPU: rows, tiles and direct tiled
//! copies, split across strata's thread pool.

use smallvec::SmallVec;

use super::threads::{pool, spread, GRAIN_SIZE};
use super::tile;
use crate::backend::plan::{ByteStrides, PerOperand, Plan, TILE};

/// Tiles of a direct tiled copy ([`Plan::copy_tiles`]), in elements along the second and
/// the first loop dimension: narrow along the dimension the source is contiguous in (one or
/// two cache lines of each source row), long along the one the destination is contiguous
/// in, so each destination row is written in long stretches. Measured on 4096² f32.
const COPY_TILE: (usize, usize) = (32, 256);

impl Plan {
    /// Whether kernels may write operand 0 with streaming (non-temporal) stores: a fresh
    /// output ([`Plan::mark_fresh_output`]) of at least [`super::stream_bytes`], so writing
    /// it does not evict the inputs from the cache.
    pub fn streams_output(&self) -> bool {
        self.fresh_output && self.numel() * self.dtype(0).size() >= super::stream_bytes()
    }

    /// Calls `f(ptrs, inner_strides, n)` for every run of `n` elements along the innermost
    /// dimension, with each operand's address at the start of the run and its byte stride
    /// along it. Large loops that the op allowed to run in parallel are split across the pool.
    pub fn for_each_run<F>(&self, f: F)
    where
        F: Fn(&[*mut u8], &[isize], usize) + Sync,
    {
        let numel = self.numel();
        if numel == 0 {
            return;
        }
        let runs = numel / self.shape[0];
        if self.tiled {
            return self.for_each_tile_run(&f);
        }
        // Small or serial loops never touch the pool (not even to start it).
        if !self.parallel || numel < GRAIN_SIZE || pool().current_num_threads() < 2 {
            self.walk(0, runs, &f);
            return;
        }
        let threads = pool().current_num_threads();
        if runs >= threads {
            let chunks = (threads * 4).min(runs);
            spread(chunks, &|c| {
                let lo = runs * c / chunks;
                let hi = runs * (c + 1) / chunks;
                self.walk(lo, hi, &f);
            });
        } else {
            // Few long runs: split each run's elements into pieces of at least a quarter
            // of the grain size instead, a few per thread.
            let n = self.shape[0];
            let pieces = (threads * 4).min(n.div_ceil(GRAIN_SIZE / 4).max(1));
            let inner = &self.inner;
            spread(runs * pieces, &|k| {
                let (run, piece) = (k / pieces, k % pieces);
                let (lo, hi) = (n * piece / pieces, n * (piece + 1) / pieces);
                let base = self.run_start(run, 1);
                let ptrs: PerOperand<*mut u8> = base
                    .iter()
                    .zip(inner)
                    .map(|(p, s)| p.wrapping_offset(lo as isize * s))
                    .collect();
                f(&ptrs, inner, hi - lo);
            });
        }
    }

    /// Tiled walk over the two innermost dimensions, in tiles of [`TILE`]×[`TILE`] elements;
    /// column blocks (and outer positions) are split across the pool.
    ///
    /// Within a tile every operand that is not contiguous along the innermost dimension is
    /// staged in a dense buffer, transposed so that it is: inputs are gathered into it before
    /// the kernel runs, the output is written there and scattered back afterwards. The
    /// kernel therefore only ever sees contiguous runs of `TILE` elements, whatever the op.
    fn for_each_tile_run<F>(&self, f: &F)
    where
        F: Fn(&[*mut u8], &[isize], usize) + Sync,
    {
        let (n0, n1) = (self.shape[0], self.shape[1]);
        let outer: usize = self.shape[2..].iter().product();
        let jblocks = n1.div_ceil(TILE);
        let units = outer * jblocks;
        let nops = self.ptrs.len();
        let esize: PerOperand<usize> = self.dtypes.iter().map(|d| d.size()).collect();
        let staged: PerOperand<bool> = (0..nops)
            .map(|k| self.strides[k][0] != esize[k] as isize)
            .collect();
        let inner: PerOperand<isize> = (0..nops)
            .map(|k| {
                if staged[k] {
                    esize[k] as isize
                } else {
                    self.strides[k][0]
                }
            })
            .collect();
        let unit = |u: usize| {
            let (o, jb) = (u / jblocks, u % jblocks);
            let base = self.run_start(o, 2);
            let (j_lo, tj) = (jb * TILE, TILE.min(n1 - jb * TILE));
            // One tile per staged operand (u64 words: aligned for every dtype).
            let mut stage: PerOperand<Vec<u64>> = (0..nops)
                .map(|k| {
                    if staged[k] {
                        vec![0u64; TILE * TILE]
                    } else {
                        Vec::new()
                    }
                })
                .collect();
            let mut ptrs: PerOperand<*mut u8> = base.clone();
            for i0 in (0..n0).step_by(TILE) {
                let ti = TILE.min(n0 - i0);
                // Tile corners in every operand.
                let corner: PerOperand<*mut u8> = (0..nops)
                    .map(|k| {
                        let st = &self.strides[k];
                        base[k].wrapping_offset(i0 as isize * st[0] + j_lo as isize * st[1])
                    })
                    .collect();
                for (k, &is_staged) in staged.iter().enumerate().skip(1) {
                    if is_staged {
                        let st = &self.strides[k];
                        // SAFETY: the tile's elements lie inside operand k (the caller's
                        // contract for the plan), and the stage holds TILE² elements of
                        // at most 8 bytes, laid out [tj][ti].
                        unsafe {
                            tile::copy(
                                corner[k],
                                (st[0], st[1]),
                                stage[k].as_mut_ptr() as *mut u8,
                                (esize[k] as isize, (ti * esize[k]) as isize),
                                (ti, tj),
                                esize[k],
                            )
                        };
                    }
                }
                for j in 0..tj {
                    for (k, p) in ptrs.iter_mut().enumerate() {
                        *p = if staged[k] {
                            (stage[k].as_mut_ptr() as *mut u8).wrapping_add(j * ti * esize[k])
                        } else {
                            corner[k].wrapping_offset(j as isize * self.strides[k][1])
                        };
                    }
                    f(&ptrs, &inner, ti);
                }
                if staged[0] {
                    let st = &self.strides[0];
                    // SAFETY: the kernel wrote all ti×tj elements of the stage; the tile
                    // lies inside the output, which this unit alone writes there.
                    unsafe {
                        tile::copy(
                            stage[0].as_ptr() as *const u8,
                            (esize[0] as isize, (ti * esize[0]) as isize),
                            corner[0],
                            (st[0], st[1]),
                            (ti, tj),
                            esize[0],
                        )
                    };
                }
            }
        };
        spread(units, &unit);
    }

    /// Copies operand 1 into operand 0 tile by tile, each tile in one move (a register
    /// transpose where the two sides run in crossed directions), when the loop is tiled and
    /// the two operands have one dtype. Returns false, having done nothing, otherwise.
    ///
    /// # Safety
    /// As for [`kernels::copy`](super::kernels::copy): the operands are valid for the loop and
    /// the output is write-locked.
    pub(crate) unsafe fn copy_tiles(&self) -> bool {
        if !self.tiled || self.ptrs.len() != 2 || self.dtypes[0] != self.dtypes[1] {
            return false;
        }
        let (n0, n1) = (self.shape[0], self.shape[1]);
        let (ct, ci) = COPY_TILE;
        let jblocks = n1.div_ceil(ct);
        let units = self.shape[2..].iter().product::<usize>() * jblocks;
        let esize = self.dtypes[0].size();
        let (s0, s1) = (&self.strides[0], &self.strides[1]);
        let unit = |u: usize| {
            let (o, jb) = (u / jblocks, u % jblocks);
            let base = self.run_start(o, 2);
            let (j_lo, tj) = (jb * ct, ct.min(n1 - jb * ct));
            for i0 in (0..n0).step_by(ci) {
                let ti = ci.min(n0 - i0);
                let at = |p: *mut u8, st: &ByteStrides| {
                    p.wrapping_offset(i0 as isize * st[0] + j_lo as isize * st[1])
                };
                // SAFETY: the tile lies inside both operands (the plan's contract); a tiled
                // plan is a parallel one, so the input does not overlap the output, and this
                // unit alone writes these output elements.
                unsafe {
                    tile::copy(
                        at(base[1], s1),
                        (s1[0], s1[1]),
                        at(base[0], s0),
                        (s0[0], s0[1]),
                        (ti, tj),
                        esize,
                    )
                };
            }
        };
        spread(units, &unit);
        true
    }

    /// Operand addresses at the start of run number `run`, counting runs over the
    /// dimensions from `first` on.
    fn run_start(&self, run: usize, first: usize) -> PerOperand<*mut u8> {
        let mut rem = run;
        let mut offsets: PerOperand<isize> = smallvec::smallvec![0; self.ptrs.len()];
        for (d, &s) in self.shape.iter().enumerate().skip(first) {
            let i = (rem % s) as isize;
            rem /= s;
            for (k, off) in offsets.iter_mut().enumerate() {
                *off += i * self.strides[k][d];
            }
        }
        self.ptrs
            .iter()
            .zip(offsets)
            .map(|(p, o)| p.wrapping_offset(o))
            .collect()
    }

    fn walk<F>(&self, lo: usize, hi: usize, f: &F)
    where
        F: Fn(&[*mut u8], &[isize], usize),
    {
        let inner = &self.inner;
        let n = self.shape[0];
        if self.shape.len() == 1 {
            // One run (lo = 0, hi = 1): the whole loop.
            if lo < hi {
                f(&self.ptrs, inner, n);
            }
            return;
        }
        let outer = &self.shape[1..];
        let mut index: SmallVec<[usize; 6]> = smallvec::smallvec![0; outer.len()];
        let mut rem = lo;
        for (d, &s) in outer.iter().enumerate() {
            index[d] = rem % s;
            rem /= s;
        }
        let mut ptrs: PerOperand<*mut u8> = self.run_start(lo, 1);
        for _ in lo..hi {
            f(&ptrs, inner, n);
            // Advance the odometer over the outer dimensions.
            for d in 0..outer.len() {
                index[d] += 1;
                for (p, st) in ptrs.iter_mut().zip(&self.strides) {
                    *p = p.wrapping_offset(st[d + 1]);
                }
                if index[d] < outer[d] {
                    break;
                }
                for (p, st) in ptrs.iter_mut().zip(&self.strides) {
                    *p = p.wrapping_offset(-(outer[d] as isize) * st[d + 1]);
                }
                index[d] = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests;
