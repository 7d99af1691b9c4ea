//! Tests of the matrix products and their `out=` forms (the f16 and bf16 products are
//! tested in `half_products.rs`).

mod half_products;

use crate::backend::cpu::gemm::unravel;
use crate::layout::broadcast::broadcast_shapes;
use crate::{DType, Error, Result, Tensor};
use half::{bf16, f16};

/// Deterministic small values, exact in every floating dtype: multiples of 1/8 in [-2, 2].
fn values(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 33) % 33) as f64 / 8.0 - 2.0
        })
        .collect()
}

fn tensor(shape: &[usize], seed: u64, dtype: DType) -> Tensor {
    let n = shape.iter().product();
    let v = values(n, seed);
    let t = if dtype.is_floating() {
        Tensor::from_vec(v, shape).unwrap()
    } else {
        Tensor::from_vec(v.iter().map(|x| (x * 8.0) as i64).collect(), shape).unwrap()
    };
    t.to(dtype).unwrap()
}

fn as_f64(t: &Tensor) -> Vec<f64> {
    t.to(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

/// The reference: `matmul` by broadcasting and a triple loop on logical values.
fn naive(a: &Tensor, b: &Tensor) -> (Vec<usize>, Vec<f64>) {
    let (sa, sb) = (a.shape().to_vec(), b.shape().to_vec());
    let (va, vb) = (as_f64(a), as_f64(b));
    let (a2, m, k) = match sa.len() {
        1 => (vec![1, sa[0]], 1, sa[0]),
        _ => (sa.clone(), sa[sa.len() - 2], sa[sa.len() - 1]),
    };
    let (b2, n) = match sb.len() {
        1 => (vec![sb[0], 1], 1),
        _ => (sb.clone(), sb[sb.len() - 1]),
    };
    let ba = &a2[..a2.len() - 2];
    let bb = &b2[..b2.len() - 2];
    let batch = broadcast_shapes(ba, bb).unwrap();
    let nb: usize = batch.iter().product();
    let pick = |bs: &[usize], idx: &[usize]| -> usize {
        let lead = idx.len() - bs.len();
        let mut flat = 0;
        for (d, &s) in bs.iter().enumerate() {
            flat = flat * s + if s == 1 { 0 } else { idx[lead + d] };
        }
        flat
    };
    let mut out = vec![0.0; nb * m * n];
    let mut idx = vec![0; batch.len()];
    for e in 0..nb {
        unravel(e, &batch, &mut idx);
        let (ea, eb) = (pick(ba, &idx), pick(bb, &idx));
        for i in 0..m {
            for j in 0..n {
                let mut s = 0.0;
                for l in 0..k {
                    s += va[ea * m * k + i * k + l] * vb[eb * k * n + l * n + j];
                }
                out[(e * m + i) * n + j] = s;
            }
        }
    }
    let mut shape = batch;
    if sa.len() > 1 {
        shape.push(m);
    }
    if sb.len() > 1 {
        shape.push(n);
    }
    (shape, out)
}

fn assert_close(got: &[f64], want: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= tol * (1.0 + w.abs()),
            "element {i}: got {g}, want {w}"
        );
    }
}

fn check(a: &Tensor, b: &Tensor, tol: f64) {
    let r = a.matmul(b).unwrap();
    let (shape, want) = naive(a, b);
    assert_eq!(
        r.shape().as_slice(),
        shape,
        "{:?} @ {:?}",
        a.shape(),
        b.shape()
    );
    assert!(r.is_contiguous());
    assert_eq!(r.dtype(), a.dtype());
    assert_close(&as_f64(&r), &want, tol);
}

#[test]
fn matmul_matches_naive_for_transposed_and_strided_operands() {
    for dtype in [
        DType::F32,
        DType::F64,
        DType::I64,
        DType::I32,
        DType::F16,
        DType::BF16,
    ] {
        let tol = match dtype {
            DType::F16 => 1e-2,
            DType::BF16 => 2e-2,
            DType::F32 => 1e-5,
            _ => 1e-12,
        };
        let a = tensor(&[5, 7], 1, dtype);
        let b = tensor(&[7, 3], 2, dtype);
        check(&a, &b, tol);
        let at = tensor(&[7, 5], 3, dtype).t().unwrap();
        let bt = tensor(&[3, 7], 4, dtype).t().unwrap();
        check(&at, &b, tol);
        check(&a, &bt, tol);
        check(&at, &bt, tol);
        // every other row and column of larger matrices
        let big = tensor(&[10, 15], 5, dtype);
        let sa = big
            .slice(0, None, None, 2)
            .unwrap()
            .slice(1, Some(1), None, 2)
            .unwrap();
        assert_eq!(sa.shape().as_slice(), vec![5, 7]);
        check(&sa, &bt, tol);
        let sb = tensor(&[14, 9], 6, dtype)
            .slice(0, None, None, 2)
            .unwrap()
            .slice(1, None, None, 3)
            .unwrap();
        check(&sa, &sb, tol);
        // an expanded (stride-0) operand
        let row = tensor(&[1, 7], 7, dtype).expand(&[5, 7]).unwrap();
        check(&row, &sb, tol);
        assert_close(&as_f64(&sa.mm(&sb).unwrap()), &naive(&sa, &sb).1, tol);
    }
}

#[test]
fn matmul_batched_broadcast_matches_naive() {
    for dtype in [DType::F32, DType::F64, DType::I64] {
        let tol = if dtype == DType::F32 { 1e-5 } else { 1e-12 };
        check(
            &tensor(&[2, 3, 4], 1, dtype),
            &tensor(&[4, 5], 2, dtype),
            tol,
        );
        check(
            &tensor(&[3, 4], 1, dtype),
            &tensor(&[2, 4, 5], 2, dtype),
            tol,
        );
        check(
            &tensor(&[2, 1, 3, 4], 1, dtype),
            &tensor(&[3, 4, 5], 2, dtype),
            tol,
        );
        check(
            &tensor(&[1, 3, 4], 1, dtype),
            &tensor(&[4, 1, 4, 2], 2, dtype),
            tol,
        );
        let at = tensor(&[2, 4, 3], 3, dtype).transpose(1, 2).unwrap();
        let bp = tensor(&[5, 2, 4], 4, dtype).permute(&[1, 2, 0]).unwrap();
        check(&at, &bp, tol);
        check(
            &tensor(&[3, 2, 4], 5, dtype).transpose(0, 1).unwrap(),
            &tensor(&[4, 6], 6, dtype),
            tol,
        );
        let b3 = tensor(&[2, 3, 4], 7, dtype);
        let r = b3.bmm(&tensor(&[2, 4, 5], 8, dtype)).unwrap();
        assert_eq!(r.shape().as_slice(), vec![2, 3, 5]);
        assert_eq!(r.stride(), vec![15, 5, 1]);
    }
}

#[test]
fn matmul_vector_cases() {
    for dtype in [DType::F32, DType::I64] {
        let v4 = tensor(&[4], 1, dtype);
        check(&v4, &tensor(&[4], 2, dtype), 1e-5);
        check(&v4, &tensor(&[4, 3], 3, dtype), 1e-5);
        check(&tensor(&[3, 4], 4, dtype), &v4, 1e-5);
        check(&tensor(&[4, 3], 4, dtype).t().unwrap(), &v4, 1e-5);
        check(&v4, &tensor(&[2, 4, 5], 5, dtype), 1e-5);
        check(&tensor(&[2, 3, 4], 6, dtype), &v4, 1e-5);
        check(
            &tensor(&[2, 1, 3, 4], 6, dtype),
            &tensor(&[12], 7, dtype).slice(0, None, None, 3).unwrap(),
            1e-5,
        );
        let d = v4.dot(&tensor(&[4], 2, dtype)).unwrap();
        assert_eq!(d.shape().as_slice(), Vec::<usize>::new());
        assert_close(&as_f64(&d), &naive(&v4, &tensor(&[4], 2, dtype)).1, 1e-5);
    }
    let a = Tensor::from_vec(vec![1f32, 2., 3.], &[3]).unwrap();
    let b = Tensor::from_vec(vec![10f32, 20.], &[2]).unwrap();
    let o = a.outer(&b).unwrap();
    assert_eq!(o.shape().as_slice(), vec![3, 2]);
    assert_eq!(o.stride(), vec![2, 1]);
    assert_eq!(
        o.to_vec::<f32>().unwrap(),
        vec![10., 20., 20., 40., 30., 60.]
    );
    let bi = Tensor::from_vec(vec![1i64, 2], &[2]).unwrap();
    assert_eq!(a.outer(&bi).unwrap().dtype(), DType::F32);
}

#[test]
fn empty_products() {
    let z = tensor(&[3, 0], 1, DType::F32)
        .matmul(&tensor(&[0, 4], 2, DType::F32))
        .unwrap();
    assert_eq!(z.shape().as_slice(), vec![3, 4]);
    assert_eq!(z.to_vec::<f32>().unwrap(), vec![0.0; 12]);
    let zi = tensor(&[2, 3, 0], 1, DType::I64)
        .matmul(&tensor(&[0, 4], 2, DType::I64))
        .unwrap();
    assert_eq!(zi.to_vec::<i64>().unwrap(), vec![0; 24]);
    let e = tensor(&[0, 3, 4], 1, DType::F32)
        .matmul(&tensor(&[4, 5], 2, DType::F32))
        .unwrap();
    assert_eq!(
        (e.shape().to_vec(), e.stride()),
        (vec![0, 3, 5], vec![15, 5, 1])
    );
    let d = tensor(&[0], 1, DType::F64)
        .dot(&tensor(&[0], 2, DType::F64))
        .unwrap();
    assert_eq!(d.to_vec::<f64>().unwrap(), vec![0.0]);
    let c = Tensor::full(&[2, 2], 7.0, DType::F32).unwrap();
    let r = c
        .addmm(
            &tensor(&[2, 0], 1, DType::F32),
            &tensor(&[0, 2], 1, DType::F32),
            0.5,
            2.5,
        )
        .unwrap();
    assert_eq!(r.to_vec::<f32>().unwrap(), vec![3.5; 4]);
}

#[test]
fn addmm_scales_broadcasts_and_ignores_c_when_beta_is_zero() {
    let a = tensor(&[3, 4], 1, DType::F64);
    let b = tensor(&[5, 4], 2, DType::F64).t().unwrap();
    let prod = naive(&a, &b).1;
    let c = tensor(&[5], 3, DType::F64);
    let cv = as_f64(&c);
    let r = c.addmm(&a, &b, 0.5, 2.0).unwrap();
    assert_eq!((r.shape().to_vec(), r.stride()), (vec![3, 5], vec![5, 1]));
    let want: Vec<f64> = (0..15).map(|i| 0.5 * cv[i % 5] + 2.0 * prod[i]).collect();
    assert_close(&as_f64(&r), &want, 1e-12);
    let nan = Tensor::full(&[3, 5], f64::NAN, DType::F64).unwrap();
    let r = nan.addmm(&a, &b, 0, 1).unwrap();
    assert_close(&as_f64(&r), &prod, 1e-12);
    // alpha == 0 ignores the product, NaN included
    let an = Tensor::full(&[3, 4], f64::NAN, DType::F64).unwrap();
    let r = c.addmm(&an, &b, 1, 0).unwrap();
    assert_close(
        &as_f64(&r),
        &(0..15).map(|i| cv[i % 5]).collect::<Vec<_>>(),
        0.0,
    );
    // integers: scalars convert to the dtype (0.5 truncates to 0), arithmetic wraps
    let ci = Tensor::full(&[2, 2], 7i64, DType::I64).unwrap();
    let ones_a = Tensor::ones(&[2, 3], DType::I64).unwrap();
    let ones_b = Tensor::ones(&[3, 2], DType::I64).unwrap();
    assert_eq!(
        ci.addmm(&ones_a, &ones_b, 0.5, 1)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![3; 4]
    );
    assert_eq!(
        ci.addmm(&ones_a, &ones_b, 1, 1.5)
            .unwrap()
            .to_vec::<i64>()
            .unwrap(),
        vec![10; 4]
    );
    let f16c = Tensor::full(&[2, 2], 7.0, DType::F16).unwrap();
    let r = f16c
        .addmm(
            &Tensor::ones(&[2, 3], DType::F16).unwrap(),
            &Tensor::ones(&[3, 2], DType::F16).unwrap(),
            0.5,
            2.5,
        )
        .unwrap();
    assert_eq!(r.to_vec::<f16>().unwrap(), vec![f16::from_f32(11.0); 4]);
    let bfc = Tensor::full(&[2, 2], 7.0, DType::BF16).unwrap();
    let r = bfc
        .addmm(
            &Tensor::ones(&[2, 3], DType::BF16).unwrap(),
            &Tensor::ones(&[3, 2], DType::BF16).unwrap(),
            0.5,
            2.5,
        )
        .unwrap();
    assert_eq!(r.to_vec::<bf16>().unwrap(), vec![bf16::from_f32(11.0); 4]);
}

#[test]
fn integer_products_wrap() {
    let a = Tensor::from_vec(vec![200u8, 100], &[1, 2]).unwrap();
    let b = Tensor::from_vec(vec![2u8, 3], &[2, 1]).unwrap();
    assert_eq!(
        a.matmul(&b).unwrap().to_vec::<u8>().unwrap(),
        vec![((400 + 300) % 256) as u8]
    );
    let big = Tensor::from_vec(vec![i64::MAX, 2], &[2]).unwrap();
    let r = big
        .dot(&Tensor::from_vec(vec![2i64, 1], &[2]).unwrap())
        .unwrap();
    assert_eq!(
        r.item::<i64>().unwrap(),
        i64::MAX.wrapping_mul(2).wrapping_add(2)
    );
}

#[test]
fn large_products_run_in_parallel_and_match() {
    let a = tensor(&[130, 70], 1, DType::F64);
    let b = tensor(&[90, 70], 2, DType::F64).t().unwrap();
    check(&a, &b, 1e-12);
    check(
        &tensor(&[64, 20, 20], 3, DType::F64),
        &tensor(&[64, 20, 20], 4, DType::F64),
        1e-12,
    );
    check(
        &tensor(&[40, 20, 20], 3, DType::I64),
        &tensor(&[20, 30], 4, DType::I64),
        0.0,
    );
    check(
        &tensor(&[70, 80], 3, DType::I64),
        &tensor(&[80, 60], 4, DType::I64),
        0.0,
    );
    check(
        &tensor(&[70, 80], 3, DType::BF16),
        &tensor(&[80, 60], 4, DType::BF16),
        2e-2,
    );
}

#[test]
fn errors_name_shapes_and_dtypes() {
    let f = |s: &[usize]| Tensor::zeros(s, DType::F32).unwrap();
    let msg = |r: Result<Tensor>| r.unwrap_err().to_string();
    let e = msg(f(&[3, 4]).matmul(&f(&[5, 6])));
    assert!(
        e.contains("[3, 4]") && e.contains("[5, 6]") && e.contains("Hint"),
        "{e}"
    );
    assert!(matches!(f(&[]).matmul(&f(&[3])), Err(Error::Shape { .. })));
    let e = msg(f(&[2, 3, 4]).matmul(&f(&[3, 4, 5])));
    assert!(e.contains("[2, 3, 4]") && e.contains("[3, 4, 5]"), "{e}");
    let d = Tensor::zeros(&[4, 5], DType::F64).unwrap();
    let e = f(&[3, 4]).matmul(&d).unwrap_err();
    assert!(
        matches!(e, Error::DType { .. }) && e.to_string().contains("f64"),
        "{e}"
    );
    let bools = Tensor::zeros(&[2, 2], DType::Bool).unwrap();
    assert!(matches!(bools.matmul(&bools), Err(Error::DType { .. })));
    assert!(matches!(bools.mm(&bools), Err(Error::DType { .. })));
    assert_eq!(
        bools
            .select(0, 0)
            .unwrap()
            .outer(&bools.select(0, 1).unwrap())
            .unwrap()
            .dtype(),
        DType::Bool
    );
    assert!(matches!(
        f(&[2, 3, 4]).mm(&f(&[4, 3])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        f(&[3, 4]).bmm(&f(&[4, 3])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        f(&[1, 3, 4]).bmm(&f(&[2, 4, 3])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(f(&[3]).dot(&f(&[4])), Err(Error::Shape { .. })));
    assert!(matches!(
        f(&[2, 3]).dot(&f(&[2, 3])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        f(&[2, 3]).outer(&f(&[2])),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        f(&[4]).addmm(&f(&[3, 4]), &f(&[4, 5]), 1, 1),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        f(&[1, 3, 5]).addmm(&f(&[3, 4]), &f(&[4, 5]), 1, 1),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(
        d.addmm(&f(&[4, 4]), &f(&[4, 5]), 1, 1),
        Err(Error::DType { .. })
    ));
}

#[test]
fn failed_matmul_out_leaves_the_output_untouched() {
    let out = Tensor::full(&[2, 2], 9.0, DType::F32).unwrap();
    let a = tensor(&[3, 4], 1, DType::F32);
    let before = (
        out.shape(),
        out.stride(),
        out.storage_id(),
        out.data_ptr(),
        out.version(),
    );
    let cases = [
        a.matmul_out(&tensor(&[5, 2], 2, DType::F32), &out),
        a.matmul_out(&tensor(&[4, 2], 2, DType::F64), &out),
        a.matmul_out(
            &tensor(&[4, 2], 2, DType::F32),
            &Tensor::zeros(&[3, 2], DType::F64).unwrap(),
        ),
        tensor(&[3, 4], 1, DType::F32).matmul_out(
            &tensor(&[4, 2], 2, DType::F32),
            &Tensor::zeros(&[1, 2], DType::F32)
                .unwrap()
                .expand(&[3, 2])
                .unwrap(),
        ),
    ];
    for r in cases {
        assert!(r.is_err());
    }
    assert_eq!(
        before,
        (
            out.shape(),
            out.stride(),
            out.storage_id(),
            out.data_ptr(),
            out.version()
        )
    );
    assert_eq!(out.to_vec::<f32>().unwrap(), vec![9.0; 4]);
    // PyTorch refuses a folded batched product into an output it cannot view as a matrix
    let t = Tensor::zeros(&[2, 5, 3], DType::F32)
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    let r = tensor(&[2, 3, 4], 1, DType::F32).matmul_out(&tensor(&[4, 5], 2, DType::F32), &t);
    assert!(matches!(r, Err(Error::Shape { .. })));
    assert_eq!(t.version(), 0);
}

#[test]
fn matmul_out_writes_in_place_without_reallocating() {
    let a = tensor(&[3, 4], 1, DType::F32);
    let b = tensor(&[5, 4], 2, DType::F32).t().unwrap();
    let want = naive(&a, &b).1;
    let out = Tensor::zeros(&[3, 5], DType::F32).unwrap();
    let (id, ptr) = (out.storage_id(), out.data_ptr());
    let r = a.matmul_out(&b, &out).unwrap();
    assert!(r.is_same(&out));
    assert_eq!(
        (out.storage_id(), out.data_ptr(), out.version()),
        (id, ptr, 1)
    );
    assert_close(&as_f64(&out), &want, 1e-5);
    // a transposed output keeps its strides
    let ot = Tensor::zeros(&[5, 3], DType::F32).unwrap().t().unwrap();
    a.matmul_out(&b, &ot).unwrap();
    assert_eq!((ot.stride(), ot.version()), (vec![1, 3], 1));
    assert_close(&as_f64(&ot), &want, 1e-5);
    // batched, written through strided batch dimensions
    let a3 = tensor(&[2, 3, 4], 3, DType::F64);
    let b3 = tensor(&[2, 4, 5], 4, DType::F64);
    let o3 = Tensor::zeros(&[2, 5, 3], DType::F64)
        .unwrap()
        .transpose(1, 2)
        .unwrap();
    a3.matmul_out(&b3, &o3).unwrap();
    assert_eq!((o3.stride(), o3.version()), (vec![15, 1, 3], 1));
    assert_close(&as_f64(&o3), &naive(&a3, &b3).1, 1e-12);
}

#[test]
fn matmul_out_resizes_and_follows_pytorch_versions() {
    let a = tensor(&[3, 4], 1, DType::F32);
    let b = tensor(&[4, 2], 2, DType::F32);
    let out = Tensor::zeros(&[0], DType::F32).unwrap();
    a.matmul_out(&b, &out).unwrap();
    assert_eq!(
        (out.shape().to_vec(), out.stride(), out.version()),
        (vec![3, 2], vec![2, 1], 1)
    );
    assert_close(&as_f64(&out), &naive(&a, &b).1, 1e-5);
    // vector · matrix: written through [1, p] and squeezed, two versions as in PyTorch
    let v = tensor(&[3], 3, DType::F32);
    let o = Tensor::zeros(&[8], DType::F32)
        .unwrap()
        .slice(0, Some(1), None, 2)
        .unwrap();
    assert_eq!(o.shape().to_vec(), vec![4]);
    v.matmul_out(&tensor(&[3, 4], 4, DType::F32), &o).unwrap();
    assert_eq!(
        (
            o.shape().to_vec(),
            o.stride(),
            o.storage_offset(),
            o.version()
        ),
        (vec![4], vec![1], 1, 2)
    );
    assert_close(
        &as_f64(&o),
        &naive(&v, &tensor(&[3, 4], 4, DType::F32)).1,
        1e-5,
    );
    // dot into a 0-d output
    let d = Tensor::zeros(&(), DType::F32).unwrap();
    v.matmul_out(&v, &d).unwrap();
    assert_eq!(d.version(), 1);
    assert_close(&as_f64(&d), &naive(&v, &v).1, 1e-5);
}

#[test]
fn matmul_out_may_alias_its_inputs() {
    let x = tensor(&[4, 4], 1, DType::F64);
    let want = naive(&x, &x).1;
    x.matmul_out(&x, &x).unwrap();
    assert_close(&as_f64(&x), &want, 1e-12);
    let y = tensor(&[4, 4], 2, DType::F64);
    let yt = y.t().unwrap();
    let want = naive(&y, &yt).1;
    y.matmul_out(&yt, &yt).unwrap();
    assert_close(&as_f64(&yt), &want, 1e-12);
    assert_eq!(y.version(), 1);
}

#[test]
fn product_out_forms_match_their_ops() {
    use crate::ops::out::testing::{check_dtype_refused, check_out_form};
    for dtype in [DType::F32, DType::F64, DType::I64] {
        let (a, b) = (tensor(&[3, 4], 1, dtype), tensor(&[4, 5], 2, dtype));
        let bt = tensor(&[5, 4], 3, dtype).t().unwrap();
        check_out_form(&a.mm(&b).unwrap(), 1e-6, |o| a.mm_out(&b, o));
        check_out_form(&a.mm(&bt).unwrap(), 1e-6, |o| a.mm_out(&bt, o));
        let (a3, b3) = (tensor(&[2, 3, 4], 4, dtype), tensor(&[2, 4, 5], 5, dtype));
        check_out_form(&a3.bmm(&b3).unwrap(), 1e-6, |o| a3.bmm_out(&b3, o));
        let c = tensor(&[5], 6, dtype);
        check_out_form(&c.addmm(&a, &b, 2i64, 3i64).unwrap(), 1e-6, |o| {
            c.addmm_out(&a, &b, 2i64, 3i64, o)
        });
        let (u, v) = (tensor(&[4], 7, dtype), tensor(&[4], 8, dtype));
        check_out_form(&u.dot(&v).unwrap(), 1e-6, |o| u.dot_out(&v, o));
        check_out_form(&u.outer(&c).unwrap(), 0.0, |o| u.outer_out(&c, o));
        check_out_form(&a.matmul(&b).unwrap(), 1e-6, |o| a.matmul_out(&b, o));
    }
    // Products never convert their result (PyTorch: "Expected out tensor to have dtype
    // float, but got double"); outer is an element-wise product and converts.
    let (a, b) = (
        tensor(&[3, 4], 1, DType::F32),
        tensor(&[4, 5], 2, DType::F32),
    );
    check_dtype_refused(&[3, 5], DType::F64, |o| a.mm_out(&b, o));
    let (a3, b3) = (
        tensor(&[1, 3, 4], 1, DType::F32),
        tensor(&[1, 4, 5], 2, DType::F32),
    );
    check_dtype_refused(&[1, 3, 5], DType::F64, |o| a3.bmm_out(&b3, o));
    let c = tensor(&[5], 3, DType::F32);
    check_dtype_refused(&[3, 5], DType::F64, |o| c.addmm_out(&a, &b, 1i64, 1i64, o));
    let u = tensor(&[4], 4, DType::F32);
    check_dtype_refused(&[], DType::F64, |o| u.dot_out(&u, o));
    check_dtype_refused(&[4, 4], DType::I64, |o| u.outer_out(&u, o));
    let wide = Tensor::zeros(&[4, 5], DType::F64).unwrap();
    u.outer_out(&c, &wide).unwrap();
    assert_eq!(as_f64(&wide), as_f64(&u.outer(&c).unwrap()));
}

#[test]
fn product_outs_validate_first_and_may_alias_their_operands() {
    let x = tensor(&[4, 4], 1, DType::F64);
    let out = Tensor::full(&[4, 4], 5.0, DType::F64).unwrap();
    // Shape errors and expanded outputs leave the output as it was.
    let expanded = Tensor::zeros(&[4], DType::F64)
        .unwrap()
        .expand(&[4, 4])
        .unwrap();
    assert!(matches!(
        x.mm_out(&x, &expanded),
        Err(Error::Overlap { .. })
    ));
    assert!(matches!(
        x.mm_out(&tensor(&[3, 4], 2, DType::F64), &out),
        Err(Error::Shape { .. })
    ));
    assert!(matches!(x.bmm_out(&x, &out), Err(Error::Shape { .. })));
    assert!(matches!(
        tensor(&[3], 1, DType::F64).dot_out(&tensor(&[4], 1, DType::F64), &out),
        Err(Error::Shape { .. })
    ));
    assert_eq!((out.version(), as_f64(&out)), (0, vec![5.0; 16]));
    // As PyTorch (and matmul_out), the output may be an operand.
    let want = naive(&x, &x).1;
    let y = x.deep_clone().unwrap();
    y.mm_out(&y, &y).unwrap();
    assert_close(&as_f64(&y), &want, 1e-12);
    assert_eq!(y.version(), 1);
    let z = x.deep_clone().unwrap();
    let want: Vec<f64> = as_f64(&z.addmm(&x, &x, 1i64, 1i64).unwrap());
    z.addmm_out(&x, &x, 1i64, 1i64, &z).unwrap();
    assert_close(&as_f64(&z), &want, 1e-12);
    // Grad.
    let leaf = x.deep_clone().unwrap().requires_grad_(true).unwrap();
    assert!(matches!(leaf.mm_out(&x, &out), Err(Error::Autograd { .. })));
    let row = leaf.select(0, 0).unwrap();
    assert!(matches!(
        row.outer_out(&row, &out),
        Err(Error::Autograd { .. })
    ));
    assert_eq!(out.version(), 0);
}
