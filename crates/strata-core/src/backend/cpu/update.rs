//! Fused optimizer updates: one pass over a parameter, its gradient and its state, each
//! element read once and written once, in chunks spread over strata's pool.
//!
//! f32 and f64 compute in their own precision; f16 and bf16 parameters compute in f32 and
//! round what they store (parameter and state) once per step.

use half::{bf16, f16};
use rayon::prelude::*;

use super::gather::SharedPtr;
use super::math::Float;
use super::threads::{pool, GRAIN_SIZE};
use crate::backend::args::UpdateArgs;
use crate::backend::kernel::{AdamStep, SgdStep, UpdatePtrs, UpdateRule};
use crate::DType;

/// Applies `rule` to the operands in `ptrs`, elements of `dtype`.
///
/// # Safety
/// `param` and each state pointer the rule uses address `n` writable elements of `dtype`,
/// `grad` `n` readable ones; the written operands share no memory with each other or with
/// `grad`, and nothing else touches them meanwhile.
pub(crate) unsafe fn update(args: &UpdateArgs<'_>) {
    let (rule, ptrs) = (args.rule, args.ptrs);
    // SAFETY: forwarded from the caller.
    unsafe {
        match args.dtype {
            DType::F32 => run::<f32, f32>(rule, ptrs),
            DType::F64 => run::<f64, f64>(rule, ptrs),
            DType::F16 => run::<f16, f32>(rule, ptrs),
            DType::BF16 => run::<bf16, f32>(rule, ptrs),
            // The op layer only passes floating dtypes.
            _ => {}
        }
    }
}

/// A stored element and the compute type it widens to.
trait Stored<W>: Copy + Send + Sync {
    fn load(self) -> W;
    fn store(w: W) -> Self;
}

impl<T: Copy + Send + Sync> Stored<T> for T {
    #[inline(always)]
    fn load(self) -> T {
        self
    }
    #[inline(always)]
    fn store(w: T) -> T {
        w
    }
}

impl Stored<f32> for f16 {
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(w: f32) -> f16 {
        f16::from_f32(w)
    }
}

impl Stored<f32> for bf16 {
    #[inline(always)]
    fn load(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn store(w: f32) -> bf16 {
        // The same rounding as `bf16::from_f32`, without a branch.
        bf16::from_bits(super::convert::bf16_bits(w))
    }
}

/// Splits the `n` elements into chunks and runs `rule` on each, in parallel when there are
/// several.
///
/// # Safety
/// As [`update`], with `S` the parameter's element type.
unsafe fn run<S: Stored<W>, W: Float>(rule: &UpdateRule, ptrs: &UpdatePtrs) {
    let shared = Shared {
        param: SharedPtr(ptrs.param),
        grad: SharedPtr(ptrs.grad as *mut u8),
        state: ptrs.state.map(SharedPtr),
    };
    let n = ptrs.n;
    let chunk = |start: usize| {
        let len = GRAIN_SIZE.min(n - start);
        // SAFETY: `start..start + len` lies inside every operand, and each chunk is touched
        // by this call only (the caller's contract makes the operands disjoint).
        unsafe {
            let rows = Rows::<S>::at(&shared, start, len);
            match rule {
                UpdateRule::Sgd(s) => sgd::<S, W>(s, rows),
                UpdateRule::Adam(a) => adam::<S, W>(a, rows),
            }
        }
    };
    if n <= GRAIN_SIZE {
        if n > 0 {
            chunk(0);
        }
    } else {
        pool().install(|| {
            (0..n.div_ceil(GRAIN_SIZE))
                .into_par_iter()
                .for_each(|c| chunk(c * GRAIN_SIZE));
        });
    }
}

/// The operands' addresses, shareable across the pool.
struct Shared {
    param: SharedPtr,
    grad: SharedPtr,
    state: [SharedPtr; 3],
}

/// One chunk of every operand, as slices.
struct Rows<'a, S> {
    p: &'a mut [S],
    g: &'a [S],
    s: [&'a mut [S]; 3],
}

impl<S> Rows<'_, S> {
    /// The chunk `start..start + len` of each operand (empty for unused state).
    ///
    /// # Safety
    /// The range lies inside every used operand and no other live reference covers it.
    unsafe fn at(sh: &Shared, start: usize, len: usize) -> Self {
        let slice = |p: SharedPtr| -> &mut [S] {
            if p.get().is_null() {
                return &mut [];
            }
            // SAFETY: forwarded from the caller.
            unsafe { std::slice::from_raw_parts_mut((p.get() as *mut S).add(start), len) }
        };
        Rows {
            p: slice(sh.param),
            g: slice(sh.grad),
            s: sh.state.map(slice),
        }
    }
}

/// SGD over one chunk (see [`SgdStep`]).
// Indexed: the buffer slice is empty without momentum, so it cannot be zipped.
#[allow(clippy::needless_range_loop)]
fn sgd<S: Stored<W>, W: Float>(c: &SgdStep, rows: Rows<'_, S>) {
    let (lr, mu, wd) = (
        W::from_f64(c.lr),
        W::from_f64(c.momentum),
        W::from_f64(c.weight_decay),
    );
    let keep = W::from_f64(1.0 - c.dampening);
    let [buf, _, _] = rows.s;
    for i in 0..rows.p.len() {
        let p = rows.p[i].load();
        let mut d = rows.g[i].load();
        if c.maximize {
            d = d.neg();
        }
        if c.weight_decay != 0.0 {
            d = d.add(wd.mul(p));
        }
        if c.momentum != 0.0 {
            let b = if c.first_step {
                d
            } else {
                buf[i].load().mul(mu).add(keep.mul(d))
            };
            buf[i] = S::store(b);
            d = if c.nesterov { d.add(mu.mul(b)) } else { b };
        }
        rows.p[i] = S::store(p.sub(lr.mul(d)));
    }
}

/// Adam over one chunk (see [`AdamStep`]), its loop specialised on the step's switches so
/// that it has no branch left to vectorise around.
fn adam<S: Stored<W>, W: Float>(c: &AdamStep, rows: Rows<'_, S>) {
    let decay = match (c.weight_decay != 0.0, c.decoupled_weight_decay) {
        (false, _) => Decay::None,
        (true, false) => Decay::Coupled,
        (true, true) => Decay::Decoupled,
    };
    match (c.maximize, decay, c.amsgrad) {
        (false, Decay::None, false) => adam_loop::<S, W, false, 0, false>(c, rows),
        (false, Decay::Coupled, false) => adam_loop::<S, W, false, 1, false>(c, rows),
        (false, Decay::Decoupled, false) => adam_loop::<S, W, false, 2, false>(c, rows),
        (true, Decay::None, false) => adam_loop::<S, W, true, 0, false>(c, rows),
        (true, Decay::Coupled, false) => adam_loop::<S, W, true, 1, false>(c, rows),
        (true, Decay::Decoupled, false) => adam_loop::<S, W, true, 2, false>(c, rows),
        (false, Decay::None, true) => adam_loop::<S, W, false, 0, true>(c, rows),
        (false, Decay::Coupled, true) => adam_loop::<S, W, false, 1, true>(c, rows),
        (false, Decay::Decoupled, true) => adam_loop::<S, W, false, 2, true>(c, rows),
        (true, Decay::None, true) => adam_loop::<S, W, true, 0, true>(c, rows),
        (true, Decay::Coupled, true) => adam_loop::<S, W, true, 1, true>(c, rows),
        (true, Decay::Decoupled, true) => adam_loop::<S, W, true, 2, true>(c, rows),
    }
}

/// How Adam applies weight decay.
#[derive(Clone, Copy)]
enum Decay {
    None,
    /// Added to the gradient (Adam).
    Coupled,
    /// Shrinking the parameter first (AdamW).
    Decoupled,
}

/// [`adam`] for one combination of switches (`DECAY`: 0 none, 1 coupled, 2 decoupled), built
/// with AVX2 where the CPU has it (separate multiplies and adds are never fused, so the
/// results are the same either way).
fn adam_loop<S: Stored<W>, W: Float, const MAXIMIZE: bool, const DECAY: u8, const AMSGRAD: bool>(
    c: &AdamStep,
    rows: Rows<'_, S>,
) {
    #[cfg(target_arch = "x86_64")]
    if super::chunk::avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { adam_loop_avx2::<S, W, MAXIMIZE, DECAY, AMSGRAD>(c, rows) };
    }
    adam_body::<S, W, MAXIMIZE, DECAY, AMSGRAD>(c, rows)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn adam_loop_avx2<
    S: Stored<W>,
    W: Float,
    const MAXIMIZE: bool,
    const DECAY: u8,
    const AMSGRAD: bool,
>(
    c: &AdamStep,
    rows: Rows<'_, S>,
) {
    adam_body::<S, W, MAXIMIZE, DECAY, AMSGRAD>(c, rows)
}

// Indexed: the amsgrad slice is empty without amsgrad, so it cannot be zipped.
#[allow(clippy::needless_range_loop)]
#[inline(always)]
fn adam_body<S: Stored<W>, W: Float, const MAXIMIZE: bool, const DECAY: u8, const AMSGRAD: bool>(
    c: &AdamStep,
    rows: Rows<'_, S>,
) {
    let t = c.step.min(i32::MAX as u64) as i32;
    let bias1 = 1.0 - c.beta1.powi(t);
    let bias2_sqrt = W::from_f64((1.0 - c.beta2.powi(t)).sqrt());
    let step_size = W::from_f64(c.lr / bias1);
    let (b1w, b2, b2w) = (
        W::from_f64(1.0 - c.beta1),
        W::from_f64(c.beta2),
        W::from_f64(1.0 - c.beta2),
    );
    let (wd, eps) = (W::from_f64(c.weight_decay), W::from_f64(c.eps));
    let shrink = W::from_f64(1.0 - c.lr * c.weight_decay);
    let [m, v, vmax] = rows.s;
    let n = rows.p.len();
    let (m, v, g) = (&mut m[..n], &mut v[..n], &rows.g[..n]);
    for i in 0..n {
        let mut p = rows.p[i].load();
        let mut d = g[i].load();
        if MAXIMIZE {
            d = d.neg();
        }
        if DECAY == 2 {
            p = p.mul(shrink);
        } else if DECAY == 1 {
            d = d.add(wd.mul(p));
        }
        let mi = lerp(m[i].load(), d, b1w, c.beta1);
        m[i] = S::store(mi);
        let vi = v[i].load().mul(b2).add(b2w.mul(d).mul(d));
        v[i] = S::store(vi);
        let second = if AMSGRAD {
            let prev = vmax[i].load();
            // torch.maximum: NaN wins.
            let top = if vi.is_nan() || prev.is_nan() || vi > prev {
                vi
            } else {
                prev
            };
            vmax[i] = S::store(top);
            top
        } else {
            vi
        };
        let denom = second.sqrt().div(bias2_sqrt).add(eps);
        rows.p[i] = S::store(p.sub(step_size.mul(mi).div(denom)));
    }
}

/// `lerp(a, b, w)` with `w = 1 − beta`, as PyTorch's kernel computes it: from `a` for a
/// weight below one half, else back from `b`.
#[inline(always)]
fn lerp<W: Float>(a: W, b: W, w: W, beta: f64) -> W {
    if beta > 0.5 {
        a.add(w.mul(b.sub(a)))
    } else {
        b.sub(b.sub(a).mul(W::from_f64(beta)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sgd_step(momentum: f64, first: bool) -> UpdateRule {
        UpdateRule::Sgd(SgdStep {
            lr: 0.1,
            momentum,
            dampening: 0.0,
            nesterov: false,
            weight_decay: 0.0,
            maximize: false,
            first_step: first,
        })
    }

    fn apply(rule: &UpdateRule, p: &mut [f32], g: &[f32], state: &mut [Vec<f32>]) {
        let mut ptrs = [std::ptr::null_mut(); 3];
        for (slot, s) in ptrs.iter_mut().zip(state.iter_mut()) {
            *slot = s.as_mut_ptr() as *mut u8;
        }
        let all = UpdatePtrs {
            param: p.as_mut_ptr() as *mut u8,
            grad: g.as_ptr() as *const u8,
            state: ptrs,
            n: p.len(),
        };
        // SAFETY: every operand holds `p.len()` elements and they are distinct vectors.
        unsafe {
            update(&UpdateArgs {
                rule,
                dtype: DType::F32,
                ptrs: &all,
            })
        };
    }

    #[test]
    fn sgd_momentum_takes_the_gradient_first_then_blends() {
        let (mut p, g) = (vec![1.0f32; 3], vec![1.0f32; 3]);
        let mut state = vec![vec![0.0f32; 3]];
        apply(&sgd_step(0.9, true), &mut p, &g, &mut state);
        assert_eq!(state[0], vec![1.0; 3]);
        assert_eq!(p, vec![0.9; 3]);
        apply(&sgd_step(0.9, false), &mut p, &g, &mut state);
        assert_eq!(state[0], vec![1.9; 3]);
        assert!((p[0] - (0.9 - 0.19)).abs() < 1e-7);
    }

    #[test]
    fn chunks_spread_over_the_pool_cover_every_element() {
        let n = 3 * GRAIN_SIZE + 17;
        let (mut p, g) = (
            vec![0.0f32; n],
            (0..n).map(|i| i as f32).collect::<Vec<_>>(),
        );
        apply(&sgd_step(0.0, true), &mut p, &g, &mut []);
        assert!(p.iter().enumerate().all(|(i, &v)| v == -0.1 * i as f32));
    }

    #[test]
    fn adam_first_step_moves_each_parameter_by_about_lr() {
        let rule = UpdateRule::Adam(AdamStep {
            lr: 0.01,
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 0.0,
            decoupled_weight_decay: false,
            amsgrad: true,
            maximize: false,
            step: 1,
        });
        let (mut p, g) = (vec![1.0f32, 1.0], vec![0.5f32, -2.0]);
        let mut state = vec![vec![0.0f32; 2], vec![0.0f32; 2], vec![0.0f32; 2]];
        apply(&rule, &mut p, &g, &mut state);
        assert!((p[0] - 0.99).abs() < 1e-6 && (p[1] - 1.01).abs() < 1e-6);
        assert_eq!(state[2], state[1]);
    }
}
