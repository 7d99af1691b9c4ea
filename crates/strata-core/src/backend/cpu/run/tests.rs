use super::*;
use crate::backend::cpu::kernels;
use crate::backend::plan::Operand;
use crate::DType;
use proptest::prelude::*;

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
            // SAFETY: the plan walks the 24 elements of `data`.
            let v = unsafe { *(p[0].offset(i as isize * s[0]) as *const u32) };
            seen.lock().unwrap().push(v);
        }
    });
    let mut seen = seen.into_inner().unwrap();
    assert_eq!(seen.len(), 24);
    seen.sort();
    assert_eq!(seen, data);
}

/// A strided operand over a private buffer: `sizes` with strides in the element order
/// `order` (fastest first), `gap` extra elements per dimension, starting `offset` in.
struct Buf {
    data: Vec<f64>,
    strides: Vec<usize>,
    offset: usize,
}

impl Buf {
    fn new(sizes: &[usize], order: &[usize], gap: usize, offset: usize, seed: f64) -> Buf {
        let mut strides = vec![0; sizes.len()];
        let mut next = 1;
        for &d in order {
            strides[d] = next;
            next *= sizes[d] + gap;
        }
        let len = offset + next + 1;
        let data = (0..len).map(|i| seed + i as f64 * 0.5).collect();
        Buf {
            data,
            strides,
            offset,
        }
    }

    fn operand(&mut self) -> Operand {
        Operand {
            ptr: self.data.as_mut_ptr().wrapping_add(self.offset) as *mut u8,
            strides: self.strides.clone(),
            dtype: DType::F64,
        }
    }
}

/// `out = a * 3 + b` through a plan built with `parallel` (tiled when an operand is
/// transposed) and returns the output buffer.
fn run_map2(shape: &[usize], out: &mut Buf, a: &mut Buf, b: &mut Buf, parallel: bool) -> Vec<f64> {
    let ops = [out.operand(), a.operand(), b.operand()];
    // Row-major loop order (the output's natural one in these tests).
    let perm: Vec<usize> = (0..shape.len()).rev().collect();
    let plan = Plan::new(shape, &ops, &perm, parallel);
    // SAFETY: every operand is a private buffer that holds its whole layout; the output is
    // distinct from the inputs.
    unsafe { kernels::map2::<f64, f64>(&plan, |x, y| x * 3.0 + y) };
    out.data.clone()
}

#[test]
fn tiled_walk_stages_transposed_inputs_and_outputs() {
    // [70, 90] with every combination of row-major and column-major operands, padded rows
    // and an offset: the tiled walk must write exactly what the serial walk writes (and
    // leave the gaps alone).
    let shape = [70, 90];
    for mask in 0..8u32 {
        let order = |bit: u32| {
            if mask & (1 << bit) != 0 {
                [0, 1]
            } else {
                [1, 0]
            }
        };
        let mk = |bit, gap, off, seed| Buf::new(&shape, &order(bit), gap, off, seed);
        let (mut o1, mut a1, mut b1) = (mk(0, 3, 5, -1.0), mk(1, 0, 2, 1.0), mk(2, 1, 0, 7.0));
        let (mut o2, mut a2, mut b2) = (mk(0, 3, 5, -1.0), mk(1, 0, 2, 1.0), mk(2, 1, 0, 7.0));
        let serial = run_map2(&shape, &mut o1, &mut a1, &mut b1, false);
        let tiled = run_map2(&shape, &mut o2, &mut a2, &mut b2, true);
        assert_eq!(serial, tiled, "operand orders {mask:03b}");
    }
}

#[test]
fn tiled_plans_are_chosen_for_transposed_operands_only() {
    let mut a = Buf::new(&[64, 64], &[1, 0], 0, 0, 0.0);
    let mut t = Buf::new(&[64, 64], &[0, 1], 0, 0, 0.0);
    let plan = Plan::new(&[64, 64], &[a.operand(), t.operand()], &[1, 0], true);
    assert!(plan.is_tiled());
    let plan = Plan::new(&[64, 64], &[a.operand(), t.operand()], &[1, 0], false);
    assert!(!plan.is_tiled());
    let mut b = Buf::new(&[64, 64], &[1, 0], 0, 0, 0.0);
    let plan = Plan::new(&[64, 64], &[a.operand(), b.operand()], &[1, 0], true);
    assert!(!plan.is_tiled());
}

#[test]
fn tiled_copy_converts_dtypes() {
    // f32 (transposed) into f64 and into i64: staged operands keep their own dtype.
    let (n0, n1) = (33, 100);
    let src: Vec<f32> = (0..n0 * n1).map(|i| i as f32 * 0.25).collect();
    for dtype in [DType::F64, DType::I64, DType::F16, DType::U8] {
        let mut out = vec![0u64; n0 * n1];
        let ops = [
            Operand {
                ptr: out.as_mut_ptr() as *mut u8,
                strides: vec![n1, 1],
                dtype,
            },
            Operand {
                ptr: src.as_ptr() as *mut u8,
                strides: vec![1, n0],
                dtype: DType::F32,
            },
        ];
        let run = |parallel: bool| {
            let plan = Plan::new(&[n0, n1], &ops, &[1, 0], parallel);
            assert_eq!(plan.is_tiled(), parallel);
            // SAFETY: `out` holds n0·n1 elements of up to 8 bytes; `src` n0·n1 f32.
            unsafe { kernels::copy(&plan) };
            let bytes = n0 * n1 * dtype.size();
            // SAFETY: `out` spans at least `bytes` bytes.
            unsafe { std::slice::from_raw_parts(out.as_ptr() as *const u8, bytes) }.to_vec()
        };
        let serial = run(false);
        assert_eq!(run(true), serial, "{dtype:?}");
    }
}

#[test]
fn linear_plans_walk_like_coalesced_ones() {
    let n = 100_003; // above the grain size: the linear loop splits across the pool
    let mut a = Buf::new(&[n], &[0], 0, 3, 1.0);
    let mut b = Buf::new(&[n], &[0], 0, 0, 2.0);
    let mut o = Buf::new(&[n], &[0], 0, 1, 0.0);
    let expected = run_map2(
        &[n],
        &mut Buf::new(&[n], &[0], 0, 1, 0.0),
        &mut a,
        &mut b,
        true,
    );
    let ops = [o.operand(), a.operand(), b.operand()];
    let operands: Vec<_> = ops.iter().map(|o| (o.ptr, o.dtype)).collect();
    let plan = Plan::linear(n, &operands, true);
    // SAFETY: as in `run_map2`.
    unsafe { kernels::map2::<f64, f64>(&plan, |x, y| x * 3.0 + y) };
    assert_eq!(o.data, expected);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    /// Any 2-d or 3-d shape, any order of dimensions per operand, gaps, offsets and a
    /// broadcast input: the tiled and serial walks agree.
    #[test]
    fn tiled_equals_serial(
        sizes in prop::collection::vec(1usize..80, 2..=3),
        orders in prop::collection::vec(any::<bool>(), 3),
        gaps in prop::collection::vec(0usize..3, 3),
        broadcast in any::<bool>(),
    ) {
        let nd = sizes.len();
        let order = |rev: bool| -> Vec<usize> {
            if rev { (0..nd).collect() } else { (0..nd).rev().collect() }
        };
        let mk = |k: usize, seed: f64| Buf::new(&sizes, &order(orders[k]), gaps[k], k, seed);
        let (mut o1, mut a1, mut b1) = (mk(0, -1.0), mk(1, 1.0), mk(2, 7.0));
        let (mut o2, mut a2, mut b2) = (mk(0, -1.0), mk(1, 1.0), mk(2, 7.0));
        if broadcast {
            // b broadcast along the last dimension (stride 0)
            b1.strides[nd - 1] = 0;
            b2.strides[nd - 1] = 0;
        }
        let serial = run_map2(&sizes, &mut o1, &mut a1, &mut b1, false);
        let tiled = run_map2(&sizes, &mut o2, &mut a2, &mut b2, true);
        prop_assert_eq!(serial, tiled);
    }
}
