//! The linear fast path against the general one: same output layout, same values, and the
//! same decisions (it must step aside wherever the general path errs or broadcasts).

use super::*;
use crate::backend::cpu::kernels;
use crate::op::OpContext;

fn t(shape: &[usize]) -> Tensor {
    let n = shape.iter().product();
    let data: Vec<f64> = (0..n).map(|i| i as f64 * 0.5 - 3.0).collect();
    Tensor::from_vec(data, shape).unwrap()
}

fn out_layout(p: &Prepared) -> Layout {
    match &p.out {
        OutPlan::New(_, l) => l.clone(),
        OutPlan::Existing(_, b) => b.layout.clone(),
        OutPlan::Resize(..) => panic!("no resize in these tests"),
    }
}

/// Runs `out = 10·a + b` (or `out = 10·a` with one input) through a prepared op.
fn run(p: Prepared) -> Tensor {
    let ctx = OpContext::enter("test");
    let two = p.inputs.len() == 2;
    p.execute(&ctx, |plan| {
        // SAFETY: the plan comes from `execute`, which holds the locks; all operands f64.
        unsafe {
            if two {
                kernels::map2::<f64, f64>(plan, |a, b| a * 10.0 + b)
            } else {
                kernels::map1::<f64, f64>(plan, |a| a * 10.0)
            }
        }
    })
    .unwrap()
}

/// Checks that `spec()` takes the linear path exactly when `expect_linear`, and that it gives
/// the general path's output layout and values.
fn check(spec: impl Fn() -> ElementwiseSpec<'static>, expect_linear: bool) {
    let fast = spec().infer_linear();
    assert_eq!(fast.is_some(), expect_linear);
    let general = spec().infer_general("test", true);
    let Some(fast) = fast else { return };
    let general = general.expect("the general path accepts what the fast path accepts");
    assert!(fast.linear && !general.linear);
    assert_eq!(out_layout(&fast), out_layout(&general));
    assert_eq!(fast.shape, general.shape);
    let (a, b) = (run(fast), run(general));
    assert_eq!(a.layout(), b.layout());
    assert_eq!(a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
}

fn leak(t: Tensor) -> &'static Tensor {
    Box::leak(Box::new(t))
}

#[test]
fn same_shape_contiguous_and_dense_operands_are_linear() {
    let (a, b) = (leak(t(&[3, 4])), leak(t(&[3, 4])));
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![a, b]),
        true,
    );
    // One element, and zero elements.
    let (a1, b1) = (leak(t(&[1])), leak(t(&[1])));
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![a1, b1]),
        true,
    );
    let (z1, z2) = (leak(t(&[0, 3])), leak(t(&[0, 3])));
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![z1, z2]),
        true,
    );
    // Both transposed the same way: dense with equal strides, output follows them.
    let (at, bt) = (leak(t(&[4, 3]).t().unwrap()), leak(t(&[4, 3]).t().unwrap()));
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![at, bt]),
        true,
    );
    // Offsets: contiguous pieces of larger storages.
    let big = t(&[5, 4]);
    let (o1, o2) = (
        leak(big.narrow(0, 1, 3).unwrap()),
        leak(big.narrow(0, 2, 3).unwrap()),
    );
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![o1, o2]),
        true,
    );
    // Size-1 dimensions with arbitrary strides.
    let base = t(&[12]);
    let odd = leak(base.as_strided(&[3, 1, 4], &[4, 99, 1], Some(0)).unwrap());
    let plain = leak(t(&[3, 1, 4]));
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![odd, plain]),
        true,
    );
}

#[test]
fn a_number_operand_keeps_the_general_layout_rule() {
    let base = t(&[12]);
    let odd = leak(base.as_strided(&[1, 12], &[1, 1], Some(0)).unwrap());
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![odd]).with_scalar_operand(true),
        true,
    );
    let at = leak(t(&[4, 3]).t().unwrap());
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![at]).with_scalar_operand(true),
        true,
    );
}

#[test]
fn other_layouts_take_the_general_path() {
    // Broadcasting, different orders, gaps, and an expanded operand.
    let (a, row) = (leak(t(&[3, 4])), leak(t(&[1, 4])));
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![a, row]),
        false,
    );
    let at = leak(t(&[4, 3]).t().unwrap());
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![leak(t(&[3, 4])), at]),
        false,
    );
    let gapped = leak(t(&[3, 8]).narrow(1, 0, 4).unwrap());
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![gapped, a]),
        false,
    );
    let expanded = leak(t(&[1, 4]).expand(&[3, 4]).unwrap());
    check(
        || ElementwiseSpec::new(Output::New(DType::F64), vec![expanded, a]),
        false,
    );
}

#[test]
fn in_place_outputs_are_linear_only_without_partial_overlap() {
    // Writing a tensor from itself (full overlap) and from a disjoint part of its storage.
    let x = leak(t(&[4, 4]));
    check(
        || ElementwiseSpec::new(Output::Existing(x), vec![x, x]),
        true,
    );
    let big = t(&[8, 4]);
    let (top, bottom) = (
        leak(big.narrow(0, 0, 4).unwrap()),
        leak(big.narrow(0, 4, 4).unwrap()),
    );
    check(
        || ElementwiseSpec::new(Output::Existing(top), vec![bottom]),
        true,
    );
    // A shifted view of the output's own storage: partial overlap is the general path's error.
    let (lo, hi) = (
        leak(big.narrow(0, 0, 4).unwrap()),
        leak(big.narrow(0, 1, 4).unwrap()),
    );
    assert!(ElementwiseSpec::new(Output::Existing(lo), vec![hi])
        .infer_linear()
        .is_none());
    assert!(ElementwiseSpec::new(Output::Existing(lo), vec![hi])
        .infer("test")
        .is_err());
    // The transpose of the output: also partial overlap.
    let xt = leak(x.t().unwrap());
    assert!(ElementwiseSpec::new(Output::Existing(x), vec![xt])
        .infer_linear()
        .is_none());
    // An expanded (self-overlapping) output.
    let e = leak(t(&[1, 4]).expand(&[3, 4]).unwrap());
    assert!(
        ElementwiseSpec::new(Output::Existing(e), vec![leak(t(&[3, 4]))])
            .infer_linear()
            .is_none()
    );
}

#[test]
fn linear_results_match_a_reference() {
    let a = t(&[5, 7]);
    let b = t(&[5, 7]);
    let got = a.add(&b).unwrap().to_vec::<f64>().unwrap();
    let (av, bv) = (a.to_vec::<f64>().unwrap(), b.to_vec::<f64>().unwrap());
    let want: Vec<f64> = av.iter().zip(&bv).map(|(x, y)| x + y).collect();
    assert_eq!(got, want);
    a.add_(&b).unwrap();
    assert_eq!(a.to_vec::<f64>().unwrap(), want);
    assert_eq!(a.version(), 1);
}

/// An arange of `dtype` viewed with `as_strided`, as the conformance runner's `strided`.
fn strided(shape: &[usize], strides: &[usize], offset: usize, dtype: DType) -> Tensor {
    let extent = offset
        + 1
        + shape
            .iter()
            .zip(strides)
            .map(|(s, st)| (s - 1) * st)
            .sum::<usize>();
    Tensor::arange(extent, dtype)
        .unwrap()
        .as_strided(shape, strides, Some(offset))
        .unwrap()
}

// The expected strides below are PyTorch 2.15's.

#[test]
fn an_input_converted_to_the_common_dtype_lays_the_output_out_as_its_dense_copy() {
    // An i32 tensor with a stretched size-1 dimension compared with an f32 one: PyTorch first
    // copies it to f32, dense in its memory order ([4, 1, 2, 4]), and that copy's strides
    // decide the order.
    let x = strided(&[1, 2, 1, 2], &[2, 1, 5, 2], 1, DType::I32)
        .expand(&[1, 2, 2, 2])
        .unwrap();
    let p = Tensor::arange(4, DType::F32)
        .unwrap()
        .reshape(&[1, 1, 2, 2])
        .unwrap();
    assert_eq!(p.eq(&x).unwrap().stride(), [8, 1, 4, 2]);
    assert_eq!(
        Tensor::addcmul(&p.to(DType::F64).unwrap(), &x, &p, 1)
            .unwrap()
            .stride(),
        [8, 1, 4, 2]
    );
    // A u8 tensor with a gap, made floating by sqrt: its f32 copy is contiguous, so the
    // result is contiguous too; an f32 tensor of the same layout keeps its order.
    let u = Tensor::arange(24, DType::U8)
        .unwrap()
        .reshape(&[2, 3, 4])
        .unwrap()
        .slice(1, Some(0), Some(1), 2)
        .unwrap()
        .permute(&[0, 2, 1])
        .unwrap();
    assert_eq!(u.stride(), [12, 1, 8]);
    assert_eq!(u.sqrt().unwrap().stride(), [4, 1, 1]);
    let f = strided(&[2, 4, 1], &[12, 1, 4], 0, DType::F32);
    assert_eq!(f.sqrt().unwrap().stride(), [4, 1, 4]);
}

#[test]
fn pow_with_a_number_is_laid_out_as_a_unary_op() {
    // The exponent is not an operand of PyTorch's loop, so the fast same-shape rule applies
    // (these bases are contiguous); in arithmetic a number is a 0-d operand and the size-1
    // dimension's stride takes part in the order.
    let x = strided(&[3, 1, 4], &[4, 1, 1], 0, DType::F32);
    assert_eq!(x.pow(1.5).unwrap().stride(), [4, 4, 1]);
    assert_eq!(x.mul(1.5).unwrap().stride(), [4, 1, 1]);
    let y = Tensor::arange(4, DType::F32)
        .unwrap()
        .reshape(&[4, 1])
        .unwrap()
        .t()
        .unwrap()
        .unsqueeze(1)
        .unwrap();
    assert_eq!(y.stride(), [1, 4, 1]);
    assert_eq!(y.pow(1.5).unwrap().stride(), [4, 4, 1]);
    assert_eq!(y.mul(1.5).unwrap().stride(), [1, 4, 1]);
}

#[test]
fn a_resized_out_of_another_dtype_is_laid_out_from_the_operands() {
    let x = Tensor::arange(4, DType::F32)
        .unwrap()
        .reshape(&[2, 1, 2])
        .unwrap()
        .permute(&[0, 2, 1])
        .unwrap();
    let p = Tensor::arange(1, DType::F32).unwrap();
    for dtype in [DType::F32, DType::F64] {
        let out = Tensor::zeros(&[1], dtype).unwrap();
        p.add_out(&x, 1, &out).unwrap();
        assert_eq!(out.stride(), [2, 1, 2]);
    }
    // Not from the computed result, which is contiguous here.
    let b = Tensor::arange(6, DType::BF16)
        .unwrap()
        .reshape(&[1, 3, 1, 2])
        .unwrap()
        .permute(&[2, 0, 1, 3])
        .unwrap();
    let s = Tensor::from_vec(vec![3.0f64], &()).unwrap();
    assert!(b.add(&s).unwrap().is_contiguous());
    let out = Tensor::zeros(&[0], DType::F32).unwrap();
    b.add_out(&s, 1, &out).unwrap();
    assert_eq!(out.stride(), [2, 6, 2, 1]);
    assert_eq!(
        out.to_vec::<f32>().unwrap(),
        vec![3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    );
}
