//! Ordering, coalescing and walking the runs of an element-wise loop.

use rayon::prelude::*;

use super::pool::{pool, GRAIN_SIZE};
use super::Operand;
use crate::dtype::DType;

/// A loop ready to run: dimensions ordered fastest first and coalesced, strides in bytes.
#[derive(Debug)]
pub struct Plan {
    shape: Vec<usize>,
    strides: Vec<Vec<isize>>,
    ptrs: Vec<*mut u8>,
    dtypes: Vec<DType>,
    parallel: bool,
    tiled: bool,
}

/// Side of the square tiles a loop with a transposed operand is walked in (elements).
const TILE: usize = 32;

// SAFETY: a Plan only carries addresses. They are dereferenced by kernels while the op holds
// the storages' locks, and chunks run in parallel only when `parallel` was granted by the op,
// which it does only when no two chunks can write the same element or read an element
// another chunk writes.
unsafe impl Sync for Plan {}
// SAFETY: as above.
unsafe impl Send for Plan {}

impl Plan {
    /// Builds the loop over `shape` for `operands` (output first), visiting dimensions in the
    /// order `perm` (fastest first, see [`crate::layout::order::iteration_order`]).
    /// `parallel` allows splitting the loop across the pool: the caller asserts that the
    /// output has no internal overlap and that every input is either disjoint from the output
    /// or identical to it.
    pub fn new(shape: &[usize], operands: &[Operand], perm: &[usize], parallel: bool) -> Plan {
        let mut dims: Vec<usize> = perm.iter().map(|&d| shape[d]).collect();
        let mut strides: Vec<Vec<isize>> = operands
            .iter()
            .map(|op| {
                let size = op.dtype.size() as isize;
                perm.iter()
                    .map(|&d| op.strides[d] as isize * size)
                    .collect()
            })
            .collect();
        if dims.is_empty() {
            dims.push(1);
            for s in &mut strides {
                s.push(0);
            }
        }
        coalesce(&mut dims, &mut strides);
        // When some operand walks the second dimension faster than the first (a transposed
        // operand), visiting whole rows would stride through memory for that operand; walk
        // square tiles instead so both operands stay in cache. Only loops that may run in any
        // order (the ones allowed to run in parallel) are reordered.
        let tiled = parallel
            && dims.len() >= 2
            && dims[0] >= TILE
            && dims[1] >= TILE
            && strides
                .iter()
                .any(|s| s[1] != 0 && s[1].unsigned_abs() < s[0].unsigned_abs());
        Plan {
            shape: dims,
            strides,
            ptrs: operands.iter().map(|o| o.ptr).collect(),
            dtypes: operands.iter().map(|o| o.dtype).collect(),
            parallel,
            tiled,
        }
    }

    /// Total elements visited.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    /// The dtype of operand `i`.
    pub fn dtype(&self, i: usize) -> DType {
        self.dtypes[i]
    }

    /// The coalesced loop shape, fastest dimension first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
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
            pool().install(|| {
                (0..chunks).into_par_iter().for_each(|c| {
                    let lo = runs * c / chunks;
                    let hi = runs * (c + 1) / chunks;
                    self.walk(lo, hi, &f);
                })
            });
        } else {
            // Few long runs: split each run's elements across the pool instead.
            let n = self.shape[0];
            let pieces = threads.min(n.div_ceil(GRAIN_SIZE / 4).max(1));
            let inner: Vec<isize> = self.strides.iter().map(|s| s[0]).collect();
            pool().install(|| {
                (0..runs * pieces).into_par_iter().for_each(|k| {
                    let (run, piece) = (k / pieces, k % pieces);
                    let (lo, hi) = (n * piece / pieces, n * (piece + 1) / pieces);
                    let base = self.run_start(run, 1);
                    let ptrs: Vec<*mut u8> = base
                        .iter()
                        .zip(&inner)
                        .map(|(p, s)| p.wrapping_offset(lo as isize * s))
                        .collect();
                    f(&ptrs, &inner, hi - lo);
                })
            });
        }
    }

    /// Tiled walk: square tiles of the two innermost dimensions, each tile as runs of at most
    /// [`TILE`] elements; column blocks (and outer positions) are split across the pool.
    fn for_each_tile_run<F>(&self, f: &F)
    where
        F: Fn(&[*mut u8], &[isize], usize) + Sync,
    {
        let (n0, n1) = (self.shape[0], self.shape[1]);
        let outer: usize = self.shape[2..].iter().product();
        let jblocks = n1.div_ceil(TILE);
        let units = outer * jblocks;
        let inner: Vec<isize> = self.strides.iter().map(|s| s[0]).collect();
        let unit = |u: usize| {
            let (o, jb) = (u / jblocks, u % jblocks);
            let base = self.run_start(o, 2);
            let (j_lo, j_hi) = (jb * TILE, ((jb + 1) * TILE).min(n1));
            let mut ptrs = base.clone();
            for i0 in (0..n0).step_by(TILE) {
                let m = TILE.min(n0 - i0);
                for j in j_lo..j_hi {
                    for (k, p) in ptrs.iter_mut().enumerate() {
                        let st = &self.strides[k];
                        *p = base[k].wrapping_offset(i0 as isize * st[0] + j as isize * st[1]);
                    }
                    f(&ptrs, &inner, m);
                }
            }
        };
        if units > 1 && pool().current_num_threads() > 1 {
            pool().install(|| (0..units).into_par_iter().for_each(unit));
        } else {
            (0..units).for_each(unit);
        }
    }

    /// Operand addresses at the start of run number `run`, counting runs over the
    /// dimensions from `first` on.
    fn run_start(&self, run: usize, first: usize) -> Vec<*mut u8> {
        let mut rem = run;
        let mut offsets = vec![0isize; self.ptrs.len()];
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
        let nops = self.ptrs.len();
        let outer = &self.shape[1..];
        let mut index = vec![0usize; outer.len()];
        let mut rem = lo;
        for (d, &s) in outer.iter().enumerate() {
            index[d] = rem % s;
            rem /= s;
        }
        let mut ptrs: Vec<*mut u8> = (0..nops)
            .map(|k| {
                let off: isize = index
                    .iter()
                    .enumerate()
                    .map(|(d, &i)| i as isize * self.strides[k][d + 1])
                    .sum();
                self.ptrs[k].wrapping_offset(off)
            })
            .collect();
        let inner: Vec<isize> = self.strides.iter().map(|s| s[0]).collect();
        let n = self.shape[0];
        for _ in lo..hi {
            f(&ptrs, &inner, n);
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

/// PyTorch's `coalesce_dimensions`: merges neighbouring dimensions that every operand walks
/// as one linear stretch, and drops size-1 dimensions.
fn coalesce(shape: &mut Vec<usize>, strides: &mut [Vec<isize>]) {
    if shape.len() <= 1 {
        return;
    }
    let can_merge = |shape: &[usize], strides: &[Vec<isize>], d0: usize, d1: usize| {
        let (s0, s1) = (shape[d0], shape[d1]);
        if s0 == 1 || s1 == 1 {
            return true;
        }
        strides.iter().all(|st| st[d0] * s0 as isize == st[d1])
    };
    let mut prev = 0;
    for d in 1..shape.len() {
        if can_merge(shape, strides, prev, d) {
            if shape[prev] == 1 {
                for st in strides.iter_mut() {
                    st[prev] = st[d];
                }
            }
            shape[prev] *= shape[d];
        } else {
            prev += 1;
            if prev != d {
                for st in strides.iter_mut() {
                    st[prev] = st[d];
                }
                shape[prev] = shape[d];
            }
        }
    }
    shape.truncate(prev + 1);
    for st in strides.iter_mut() {
        st.truncate(prev + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesces_contiguous_dims() {
        let mut shape = vec![4, 3, 2];
        let mut strides = vec![vec![4, 16, 48], vec![0, 0, 0]];
        coalesce(&mut shape, &mut strides);
        assert_eq!(shape, vec![24]);
        assert_eq!(strides, vec![vec![4], vec![0]]);
    }

    #[test]
    fn keeps_gapped_dims() {
        let mut shape = vec![3, 4];
        let mut strides = vec![vec![4, 16]];
        coalesce(&mut shape, &mut strides);
        assert_eq!(shape, vec![3, 4]);
    }

    #[test]
    fn walks_every_element_once() {
        let data: Vec<u32> = (0..24).collect();
        let ptr = data.as_ptr() as *mut u8;
        // a [4, 6] view with strides (6, 1) read in transposed order
        let ops = [Operand {
            ptr,
            strides: vec![6, 1],
            dtype: DType::I32,
        }];
        let plan = Plan::new(&[4, 6], &ops, &[0, 1], false);
        let seen = std::sync::Mutex::new(Vec::new());
        plan.for_each_run(|p, s, n| {
            for i in 0..n {
                let v = unsafe { *(p[0].offset(i as isize * s[0]) as *const u32) };
                seen.lock().unwrap().push(v);
            }
        });
        let mut seen = seen.into_inner().unwrap();
        assert_eq!(seen.len(), 24);
        seen.sort();
        assert_eq!(seen, data);
    }
}
