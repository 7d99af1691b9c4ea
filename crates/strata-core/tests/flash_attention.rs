//! The flash path of `scaled_dot_product_attention` against the math path: values and the
//! gradients of q, k and v, across blocks, masks, causal masking with L ≠ S, grouped heads,
//! strided inputs and dtypes; gradcheck in f64 on both paths; PyTorch's selection rule.

use strata_core::autograd::{gradcheck, GradcheckOptions};
use strata_core::nn::functional::{
    scaled_dot_product_attention, scaled_dot_product_attention_with, sdpa_kernel, SdpBackend,
    SdpaOptions,
};
use strata_core::random::Generator;
use strata_core::{DType, Result, Tensor};

/// A leaf of `shape` with values from `seed`.
fn leaf(shape: &[usize], dtype: DType, seed: u64) -> Result<Tensor> {
    let mut g = Generator::new(seed);
    Tensor::randn_with(shape, DType::F32, &mut g)?
        .to(dtype)?
        .requires_grad_(true)
}

/// The output and the gradients of q, k and v on `backend`, for the output's gradient
/// `weights` (f64 values).
fn run(
    backend: SdpBackend,
    qkv: &[Tensor; 3],
    opts: &SdpaOptions<'_>,
    weights: &Tensor,
) -> Result<Vec<Tensor>> {
    let fresh: Vec<Tensor> = qkv
        .iter()
        .map(|t| t.detach()?.requires_grad_(true))
        .collect::<Result<_>>()?;
    let y = sdpa_kernel(&[backend], || {
        scaled_dot_product_attention_with(&fresh[0], &fresh[1], &fresh[2], opts)
    })?;
    let expected = match backend {
        SdpBackend::Flash => Some("ScaledDotProductFlashAttentionForCpuBackward0"),
        SdpBackend::Math => None,
    };
    if let Some(name) = expected {
        // 3-d inputs run as one batch entry, the result squeezed back.
        let top = y.grad_fn_name();
        let squeezed = qkv[0].dim() == 3 && top == Some("SqueezeBackward0");
        assert!(top == Some(name) || squeezed, "flash path recorded {top:?}");
    }
    y.to(DType::F64)?
        .mul(weights)?
        .sum(None, false)?
        .backward()?;
    let mut out = vec![y.detach()?];
    for t in &fresh {
        out.push(t.grad().expect("every input gets a gradient"));
    }
    Ok(out)
}

/// Flash and math agree on the output and every gradient within `tol` (relative to the
/// largest magnitude of each).
fn agree(qkv: [Tensor; 3], opts: &SdpaOptions<'_>, tol: f64) -> Result<()> {
    let shape = sdpa_kernel(&[SdpBackend::Math], || {
        scaled_dot_product_attention_with(&qkv[0], &qkv[1], &qkv[2], opts)
    })?
    .shape();
    let mut g = Generator::new(99);
    let weights = Tensor::randn_with(&shape, DType::F64, &mut g)?;
    let flash = run(SdpBackend::Flash, &qkv, opts, &weights)?;
    let math = run(SdpBackend::Math, &qkv, opts, &weights)?;
    for (i, (f, m)) in flash.iter().zip(&math).enumerate() {
        assert_eq!(f.shape(), m.shape(), "result {i}");
        assert_eq!(f.dtype(), m.dtype(), "result {i}");
        let (f, m) = (
            f.to(DType::F64)?.to_vec::<f64>()?,
            m.to(DType::F64)?.to_vec::<f64>()?,
        );
        assert!(
            f.iter().chain(&m).all(|x| x.is_finite()),
            "result {i} is not finite"
        );
        let scale = m.iter().fold(1e-3f64, |s, x| s.max(x.abs()));
        let diff = f
            .iter()
            .zip(&m)
            .fold(0f64, |d, (a, b)| d.max((a - b).abs()));
        assert!(
            diff <= tol * scale,
            "result {i} (0 = output, then dq, dk, dv): differs by {diff} (scale {scale})"
        );
    }
    Ok(())
}

fn qkv(q: &[usize], k: &[usize], v: &[usize], dtype: DType) -> Result<[Tensor; 3]> {
    Ok([leaf(q, dtype, 1)?, leaf(k, dtype, 2)?, leaf(v, dtype, 3)?])
}

#[test]
fn flash_matches_math_across_blocks_and_causal_shapes() -> Result<()> {
    let none = SdpaOptions::default();
    let causal = SdpaOptions {
        is_causal: true,
        ..Default::default()
    };
    // One block; several query blocks (32 rows each below 192 queries) and key blocks
    // (512 keys each); L < S and L > S under causal masking (top-left aligned).
    agree(
        qkv(&[2, 3, 5, 8], &[2, 3, 7, 8], &[2, 3, 7, 8], DType::F32)?,
        &none,
        1e-5,
    )?;
    agree(
        qkv(
            &[1, 2, 100, 16],
            &[1, 2, 700, 16],
            &[1, 2, 700, 16],
            DType::F32,
        )?,
        &none,
        1e-5,
    )?;
    agree(
        qkv(
            &[1, 2, 300, 8],
            &[1, 2, 600, 8],
            &[1, 2, 600, 8],
            DType::F32,
        )?,
        &causal,
        1e-5,
    )?;
    agree(
        qkv(&[1, 2, 90, 8], &[1, 2, 40, 8], &[1, 2, 40, 8], DType::F32)?,
        &causal,
        1e-5,
    )?;
    let scaled = SdpaOptions {
        scale: Some(-0.7),
        ..Default::default()
    };
    agree(
        qkv(&[2, 1, 33, 4], &[2, 1, 65, 4], &[2, 1, 65, 4], DType::F32)?,
        &scaled,
        1e-5,
    )
}

#[test]
fn flash_matches_math_with_masks_and_dead_rows() -> Result<()> {
    let [q, k, v] = qkv(&[2, 2, 40, 8], &[2, 2, 50, 8], &[2, 2, 50, 8], DType::F32)?;
    // A bool mask [L, S] where row 3 attends nothing (0 output, 0 gradient, no NaN).
    let keep: Vec<bool> = (0..40 * 50).map(|i| i / 50 != 3 && i % 7 != 2).collect();
    let mask = Tensor::from_vec(keep, &[40, 50])?;
    let opts = SdpaOptions {
        attn_mask: Some(&mask),
        ..Default::default()
    };
    agree([q.clone(), k.clone(), v.clone()], &opts, 1e-5)?;
    let y = scaled_dot_product_attention_with(&q, &k, &v, &opts)?;
    assert_eq!(
        y.narrow(2, 3, 1)?.abs()?.sum(None, false)?.item::<f32>()?,
        0.0
    );
    // An additive mask broadcast from [1, heads, 1, S], and one of [B, 1, L, 1].
    let mut g = Generator::new(5);
    let add = Tensor::randn_with(&[1, 2, 1, 50], DType::F32, &mut g)?;
    let opts = SdpaOptions {
        attn_mask: Some(&add),
        ..Default::default()
    };
    agree([q.clone(), k.clone(), v.clone()], &opts, 1e-5)?;
    let rows = Tensor::randn_with(&[2, 1, 40, 1], DType::F32, &mut g)?;
    let opts = SdpaOptions {
        attn_mask: Some(&rows),
        ..Default::default()
    };
    agree([q, k, v], &opts, 1e-5)
}

#[test]
fn flash_matches_math_for_grouped_heads_strided_and_3d_inputs() -> Result<()> {
    let gqa = SdpaOptions {
        enable_gqa: true,
        is_causal: true,
        ..Default::default()
    };
    agree(
        qkv(&[1, 6, 20, 8], &[1, 2, 30, 8], &[1, 2, 30, 8], DType::F32)?,
        &gqa,
        1e-5,
    )?;
    // One key/value head for all query heads takes the flash path without enable_gqa.
    let none = SdpaOptions::default();
    agree(
        qkv(&[2, 4, 9, 8], &[2, 1, 11, 8], &[2, 1, 11, 8], DType::F32)?,
        &none,
        1e-5,
    )?;
    // [B, L, heads, E] seen as [B, heads, L, E]: strided heads and rows.
    let t = |seed| -> Result<Tensor> {
        let mut g = Generator::new(seed);
        Tensor::randn_with(&[2, 12, 3, 8], DType::F32, &mut g)?
            .transpose(1i64, 2i64)?
            .detach()?
            .requires_grad_(true)
    };
    agree([t(7)?, t(8)?, t(9)?], &none, 1e-5)?;
    // 3-d inputs are one batch entry of heads (and a [1, S, E] key one shared head).
    agree(
        qkv(&[3, 10, 8], &[1, 12, 8], &[1, 12, 8], DType::F32)?,
        &none,
        1e-5,
    )
}

/// The flash output lies as `[B, L, heads, E]`, as PyTorch's CPU kernel returns it (strides
/// `(8192, 32, 128, 1)` for these shapes in PyTorch 2.15), so merging the heads back copies
/// nothing; its gradient arrives through that merge as a strided view and is still exact.
/// The inputs' gradients take the inputs' layout (here `[B, L, heads, E]` seen through a
/// transpose), as PyTorch's `zeros_like` gives them, so splitting heads back is free too.
#[test]
fn flash_output_lies_as_pytorchs_and_merges_heads_without_a_copy() -> Result<()> {
    let causal = SdpaOptions {
        is_causal: true,
        ..Default::default()
    };
    let heads_view = |seed| -> Result<Tensor> {
        let mut g = Generator::new(seed);
        Tensor::randn_with(&[2, 64, 4, 32], DType::F32, &mut g)?.transpose(1i64, 2i64)
    };
    let [q, k, v] = [heads_view(1)?, heads_view(2)?, heads_view(3)?];
    let grads = |backend| -> Result<Vec<Tensor>> {
        let fresh: Vec<Tensor> = [&q, &k, &v]
            .iter()
            .map(|t| t.detach()?.requires_grad_(true))
            .collect::<Result<_>>()?;
        let y = sdpa_kernel(&[backend], || {
            scaled_dot_product_attention_with(&fresh[0], &fresh[1], &fresh[2], &causal)
        })?;
        if backend == SdpBackend::Flash {
            assert_eq!(y.stride(), vec![8192, 32, 128, 1]);
        }
        let merged = y.transpose(1i64, 2i64)?.contiguous()?;
        assert_eq!(
            merged.shares_storage(&y),
            backend == SdpBackend::Flash,
            "only the flash output merges in place"
        );
        let w = Tensor::randn_with(&[2, 64, 4, 32], DType::F32, &mut Generator::new(5))?;
        merged
            .view(&[2, 64, 128])?
            .mul(&w.view(&[2, 64, 128])?)?
            .sum(None, false)?
            .backward()?;
        let grads: Vec<Tensor> = fresh
            .iter()
            .map(|t| t.grad().expect("every input gets a gradient"))
            .collect();
        if backend == SdpBackend::Flash {
            for g in &grads {
                assert_eq!(g.stride(), vec![8192, 32, 128, 1], "a gradient's layout");
            }
        }
        Ok(grads)
    };
    let (flash, math) = (grads(SdpBackend::Flash)?, grads(SdpBackend::Math)?);
    for (f, m) in flash.iter().zip(&math) {
        let (f, m) = (f.to_vec::<f32>()?, m.to_vec::<f32>()?);
        let gap = f
            .iter()
            .zip(&m)
            .fold(0f32, |d, (a, b)| d.max((a - b).abs()));
        assert!(gap < 1e-5, "a gradient differs by {gap}");
    }
    Ok(())
}

#[test]
fn flash_matches_math_in_every_floating_dtype() -> Result<()> {
    let causal = SdpaOptions {
        is_causal: true,
        ..Default::default()
    };
    agree(
        qkv(&[1, 2, 40, 8], &[1, 2, 45, 8], &[1, 2, 45, 8], DType::F64)?,
        &causal,
        1e-12,
    )?;
    // Half precision: both compute in f32 and round once; the outputs differ by rounding.
    agree(
        qkv(&[1, 2, 40, 8], &[1, 2, 45, 8], &[1, 2, 45, 8], DType::BF16)?,
        &causal,
        2e-2,
    )?;
    agree(
        qkv(&[1, 2, 40, 8], &[1, 2, 45, 8], &[1, 2, 45, 8], DType::F16)?,
        &causal,
        4e-3,
    )?;
    // Half precision through `[B, L, heads, E]` views: the widened gradients are rounded
    // into the inputs' strided layout row by row.
    let t = |seed| -> Result<Tensor> {
        let mut g = Generator::new(seed);
        Tensor::randn_with(&[2, 12, 3, 8], DType::F32, &mut g)?
            .to(DType::BF16)?
            .transpose(1i64, 2i64)?
            .detach()?
            .requires_grad_(true)
    };
    agree([t(7)?, t(8)?, t(9)?], &causal, 2e-2)
}

#[test]
fn both_paths_pass_gradcheck_in_f64() -> Result<()> {
    let [q, k, v] = qkv(&[1, 2, 5, 3], &[1, 1, 6, 3], &[1, 1, 6, 3], DType::F64)?;
    let keep: Vec<bool> = (0..30).map(|i| i % 4 != 1).collect();
    let mask = Tensor::from_vec(keep, &[5, 6])?;
    let cases = [
        SdpaOptions {
            is_causal: true,
            ..Default::default()
        },
        SdpaOptions {
            attn_mask: Some(&mask),
            scale: Some(-0.8),
            ..Default::default()
        },
    ];
    for backend in [SdpBackend::Flash, SdpBackend::Math] {
        for opts in &cases {
            gradcheck(
                |t| {
                    sdpa_kernel(&[backend], || {
                        scaled_dot_product_attention_with(&t[0], &t[1], &t[2], opts)
                    })
                },
                &[q.clone(), k.clone(), v.clone()],
                GradcheckOptions::default(),
            )?;
        }
    }
    Ok(())
}

#[test]
fn selection_follows_pytorchs_cpu_rule() -> Result<()> {
    let path = |q: &Tensor, k: &Tensor, v: &Tensor, opts: &SdpaOptions| -> Result<String> {
        let y = scaled_dot_product_attention_with(q, k, v, opts)?;
        Ok(y.grad_fn_name().unwrap_or("none").to_owned())
    };
    let flash = "ScaledDotProductFlashAttentionForCpuBackward0";
    let [q, k, v] = qkv(&[1, 2, 5, 8], &[1, 2, 6, 8], &[1, 2, 6, 8], DType::F32)?;
    let none = SdpaOptions::default();
    assert_eq!(path(&q, &k, &v, &none)?, flash);
    let dropout = SdpaOptions {
        dropout_p: 0.5,
        ..Default::default()
    };
    assert_ne!(path(&q, &k, &v, &dropout)?, flash);
    // Ev ≠ E, 5-d and 2-d inputs, unequal batches: math.
    let v4 = leaf(&[1, 2, 6, 4], DType::F32, 4)?;
    assert_ne!(path(&q, &k, &v4, &none)?, flash);
    let q5 = leaf(&[1, 1, 2, 5, 8], DType::F32, 4)?;
    assert_ne!(path(&q5, &k, &v, &none)?, flash);
    let qb = leaf(&[2, 2, 5, 8], DType::F32, 4)?;
    assert_ne!(path(&qb, &k, &v, &none)?, flash);
    // A 3-d mask with 4-d inputs, and a mask that requires grad: math.
    let m3 = Tensor::zeros(&[2, 5, 6], DType::F32)?;
    let opts = SdpaOptions {
        attn_mask: Some(&m3),
        ..Default::default()
    };
    assert_ne!(path(&q, &k, &v, &opts)?, flash);
    let mg = Tensor::zeros(&[5, 6], DType::F32)?.requires_grad_(true)?;
    let opts = SdpaOptions {
        attn_mask: Some(&mg),
        ..Default::default()
    };
    assert_ne!(path(&q, &k, &v, &opts)?, flash);
    // 3-d inputs run fused as one batch entry, the result squeezed back.
    let q3 = leaf(&[2, 5, 8], DType::F32, 5)?;
    let y = scaled_dot_product_attention(&q3, &q3, &q3)?;
    assert_eq!(y.shape().as_slice(), [2, 5, 8]);
    assert_eq!(y.grad_fn_name(), Some("SqueezeBackward0"));
    sdpa_kernel(&[SdpBackend::Flash], || {
        scaled_dot_product_attention(&q3, &q3, &q3)
    })?;
    // Restricted to flash where it cannot run: an error naming why.
    let err = sdpa_kernel(&[SdpBackend::Flash], || {
        scaled_dot_product_attention_with(&q, &k, &v4, &none)
    })
    .unwrap_err()
    .to_string();
    assert!(err.contains("same last dimension"), "{err}");
    let err = sdpa_kernel(&[], || scaled_dot_product_attention(&q, &k, &v))
        .unwrap_err()
        .to_string();
    assert!(err.contains("no implementation is enabled"), "{err}");
    // The restriction ends with its scope.
    assert_eq!(path(&q, &k, &v, &none)?, flash);
    Ok(())
}

#[test]
fn bad_operands_are_errors_and_nan_stays_nan() -> Result<()> {
    // Keys and values of different lengths: an error on either path, never a read past v.
    let [q, k, _] = qkv(&[1, 1, 4, 8], &[1, 1, 16, 8], &[1, 1, 16, 8], DType::F32)?;
    let short = leaf(&[1, 1, 2, 8], DType::F32, 6)?;
    assert!(scaled_dot_product_attention(&q, &k, &short).is_err());
    let err = sdpa_kernel(&[SdpBackend::Flash], || {
        scaled_dot_product_attention(&q, &k, &short)
    })
    .unwrap_err();
    assert!(err.to_string().contains("as many values as keys"), "{err}");
    // Grouped heads with no key/value heads: an error, not a division by zero.
    let q2 = leaf(&[1, 2, 3, 4], DType::F32, 7)?;
    let none = leaf(&[1, 0, 3, 4], DType::F32, 8)?;
    let gqa = SdpaOptions {
        enable_gqa: true,
        ..Default::default()
    };
    assert!(scaled_dot_product_attention_with(&q2, &none, &none, &gqa).is_err());
    // A NaN query makes its row NaN on both paths (not a masked-looking 0).
    let mut values = vec![0.5f32; 2 * 5 * 4];
    values[4] = f32::NAN; // row 1 of head 0
    let qn = Tensor::from_vec(values, &[1, 2, 5, 4])?;
    let kv = leaf(&[1, 2, 6, 4], DType::F32, 9)?.detach()?;
    for backend in [SdpBackend::Flash, SdpBackend::Math] {
        let y = sdpa_kernel(&[backend], || scaled_dot_product_attention(&qn, &kv, &kv))?;
        let y = y.to_vec::<f32>()?;
        assert!(y[4..8].iter().all(|v| v.is_nan()), "{backend:?}: {y:?}");
        assert!(y[..4].iter().all(|v| v.is_finite()), "{backend:?}");
    }
    // An output gradient of another dtype is read as the output's dtype.
    let [q, k, v] = qkv(&[1, 2, 5, 8], &[1, 2, 6, 8], &[1, 2, 6, 8], DType::F32)?;
    let y = scaled_dot_product_attention(&q, &k, &v)?;
    let g = Tensor::ones(&[1, 2, 5, 8], DType::BF16)?;
    y.backward_with(Some(&g), false)?;
    let dq = q.grad().expect("a gradient").to_vec::<f32>()?;
    assert!(dq.iter().all(|x| x.is_finite()));
    Ok(())
}
