//! The ops a transformer reaches for, beyond what the conformance fixture compares with
//! PyTorch: the random ones (`randint`, `multinomial`: ranges, frequencies, errors) and the
//! edges of the deterministic ones (meta tensors, extreme shifts, gelu's tanh form in f64).

use strata_core::random::Generator;
use strata_core::{DType, Device, Tensor};

type Res = Result<(), Box<dyn std::error::Error>>;

#[test]
fn randint_draws_every_value_of_its_range_about_equally_and_repeats_with_its_seed() -> Res {
    let mut g = Generator::new(7);
    let x = Tensor::randint_with(-3, 7, &[20_000], DType::I64, &mut g)?;
    let values = x.to_vec::<i64>()?;
    let mut counts = [0usize; 10];
    for v in &values {
        assert!((-3..7).contains(v), "{v}");
        counts[(v + 3) as usize] += 1;
    }
    // 2 000 expected per value; the seed is fixed, so this cannot flake.
    assert!(
        counts.iter().all(|&c| (1_800..2_200).contains(&c)),
        "{counts:?}"
    );
    let again = Tensor::randint_with(-3, 7, &[20_000], DType::I64, &mut Generator::new(7))?;
    assert_eq!(again.to_vec::<i64>()?, values);
    // Other dtypes, and the whole i64 range.
    let bytes = Tensor::randint_with(0, 256, &[100], DType::U8, &mut g)?;
    assert_eq!(bytes.dtype(), DType::U8);
    let floats = Tensor::randint_with(0, 3, &[50], DType::F32, &mut g)?;
    assert!(floats
        .to_vec::<f32>()?
        .iter()
        .all(|v| [0.0, 1.0, 2.0].contains(v)));
    Tensor::randint_with(i64::MIN, i64::MAX, &[8], DType::I64, &mut g)?;
    // On meta: the shape, no values drawn.
    let meta = Tensor::on(Device::Meta).randint(0, 10, &[4, 4], DType::I64)?;
    assert_eq!(meta.shape().as_slice(), [4, 4]);
    Ok(())
}

#[test]
fn randint_refuses_an_empty_range_and_values_the_dtype_cannot_hold() {
    let mut g = Generator::new(0);
    let e = Tensor::randint_with(3, 3, &[2], DType::I64, &mut g).unwrap_err();
    assert!(e.to_string().contains("low < high"), "{e}");
    let e = Tensor::randint_with(0, 257, &[2], DType::U8, &mut g).unwrap_err();
    assert!(
        e.to_string().contains("high - 1 = 256 is out of bounds"),
        "{e}"
    );
    let e = Tensor::randint_with(-1, 2, &[2], DType::Bool, &mut g).unwrap_err();
    assert!(e.to_string().contains("low = -1 is out of bounds"), "{e}");
    let e = Tensor::randint_with(0, 3, &[2], DType::Bool, &mut g).unwrap_err();
    assert!(e.to_string().contains("high - 1 = 2"), "{e}");
    let coins = Tensor::randint_with(0, 2, &[64], DType::Bool, &mut g).unwrap();
    let heads = coins
        .to_vec::<bool>()
        .unwrap()
        .iter()
        .filter(|b| **b)
        .count();
    assert!((16..48).contains(&heads), "{heads}");
}

#[test]
fn multinomial_draws_in_proportion_never_draws_a_zero_weight_and_without_replacement_never_repeats(
) -> Res {
    let mut g = Generator::new(3);
    let weights = Tensor::from_vec(vec![1.0f32, 0.0, 3.0, 4.0], &[4])?;
    let drawn = weights.multinomial_with(8_000, true, &mut g)?;
    assert_eq!(
        (drawn.dtype(), drawn.shape().to_vec()),
        (DType::I64, vec![8_000])
    );
    let mut counts = [0usize; 4];
    for k in drawn.to_vec::<i64>()? {
        counts[k as usize] += 1;
    }
    assert_eq!(counts[1], 0);
    // Expected 1 000, 0, 3 000, 4 000 (fixed seed).
    assert!((900..1_100).contains(&counts[0]), "{counts:?}");
    assert!((2_850..3_150).contains(&counts[2]), "{counts:?}");
    assert!((3_800..4_200).contains(&counts[3]), "{counts:?}");

    // Rows draw independently; without replacement each row's draws are distinct.
    let rows = Tensor::from_vec(vec![1.0f64, 1.0, 1.0, 0.0, 0.0, 5.0, 1.0, 1.0], &[2, 4])?;
    let drawn = rows.multinomial_with(3, false, &mut g)?;
    assert_eq!(drawn.shape().as_slice(), [2, 3]);
    for row in drawn.to_vec::<i64>()?.chunks(3) {
        let mut r = row.to_vec();
        r.sort();
        r.dedup();
        assert_eq!(r.len(), 3, "{row:?}");
    }
    // The first row has three positive weights: all three come out.
    let mut first = drawn.to_vec::<i64>()?[..3].to_vec();
    first.sort();
    assert_eq!(first, vec![0, 1, 2]);

    let meta = Tensor::on(Device::Meta).zeros(&[5, 10], DType::F32)?;
    assert_eq!(meta.multinomial(2, true)?.shape().as_slice(), [5, 2]);
    Ok(())
}

#[test]
fn multinomial_refuses_what_pytorch_refuses() -> Res {
    let mut g = Generator::new(0);
    let bad = |w: Vec<f32>, n: usize, replacement: bool, g: &mut Generator| {
        Tensor::from_vec(w.clone(), &[w.len()])
            .and_then(|t| t.multinomial_with(n, replacement, g))
            .unwrap_err()
            .to_string()
    };
    assert!(bad(vec![0.0, 0.0], 1, true, &mut g).contains("sum of probabilities <= 0"));
    assert!(bad(vec![1.0, -1.0], 1, true, &mut g).contains("element < 0"));
    assert!(bad(vec![1.0, f32::NAN], 1, true, &mut g).contains("`nan`"));
    assert!(bad(vec![1.0, 1.0], 3, false, &mut g).contains("without replacement"));
    assert!(bad(vec![1.0, 0.0, 0.0], 2, false, &mut g).contains("not enough"));
    assert!(bad(vec![1.0], 0, true, &mut g).contains("n_sample <= 0"));
    let e = Tensor::ones(&[2, 2, 2], DType::F32)?
        .multinomial(1, true)
        .unwrap_err();
    assert!(e.to_string().contains("1 or 2 dim"), "{e}");
    let e = Tensor::ones(&[3], DType::I64)?
        .multinomial(1, true)
        .unwrap_err();
    assert!(e.to_string().contains("floating"), "{e}");
    Ok(())
}

#[test]
fn triu_tril_and_roll_work_on_meta_and_with_extreme_arguments() -> Res {
    let meta = Tensor::on(Device::Meta).zeros(&[2, 128, 128], DType::F32)?;
    assert_eq!(meta.triu(1)?.shape().as_slice(), [2, 128, 128]);
    assert_eq!(meta.roll(&[5], &[-1])?.shape().as_slice(), [2, 128, 128]);
    let x = Tensor::from_vec((0..6i64).collect::<Vec<_>>(), &[2, 3])?;
    // Shifts far beyond the size, either way, reduce modulo it without overflow.
    assert_eq!(
        x.roll(&[i64::MIN], &[1])?.to_vec::<i64>()?,
        x.roll(&[i64::MIN % 3], &[1])?.to_vec::<i64>()?
    );
    assert_eq!(
        x.roll(&[i64::MAX], &[])?.to_vec::<i64>()?,
        x.roll(&[i64::MAX % 6], &[])?.to_vec::<i64>()?
    );
    // Diagonals past either corner keep all or nothing.
    assert_eq!(x.triu(i64::MIN)?.to_vec::<i64>()?, x.to_vec::<i64>()?);
    assert_eq!(x.triu(i64::MAX)?.to_vec::<i64>()?, vec![0; 6]);
    // In place and into a given tensor.
    let y = Tensor::ones(&[3, 3], DType::F32)?;
    y.tril_(-1)?;
    assert_eq!(y.to_vec::<f32>()?, vec![0., 0., 0., 1., 0., 0., 1., 1., 0.]);
    let out = Tensor::zeros(&[1], DType::F32)?;
    Tensor::ones(&[2, 2], DType::F32)?.triu_out(0, &out)?;
    assert_eq!(out.to_vec::<f32>()?, vec![1., 1., 0., 1.]);
    Ok(())
}

#[test]
fn gelu_tanh_is_the_tanh_formula_and_its_gradient_in_f64() -> Res {
    let xs: Vec<f64> = (-40..=40).map(|i| i as f64 * 0.15).collect();
    let x = Tensor::from_vec(xs.clone(), &[xs.len()])?.requires_grad_(true)?;
    let y = x.gelu_tanh()?;
    y.sum(None, false)?.backward()?;
    let (values, grads) = (y.to_vec::<f64>()?, x.grad().unwrap().to_vec::<f64>()?);
    let beta = (2.0 / std::f64::consts::PI).sqrt();
    for (i, &v) in xs.iter().enumerate() {
        let t = (beta * (v + 0.044715 * v * v * v)).tanh();
        let want = 0.5 * v * (1.0 + t);
        let slope =
            0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * beta * (1.0 + 3.0 * 0.044715 * v * v);
        assert!(
            (values[i] - want).abs() < 1e-12,
            "{v}: {} vs {want}",
            values[i]
        );
        assert!(
            (grads[i] - slope).abs() < 1e-12,
            "{v}: {} vs {slope}",
            grads[i]
        );
    }
    Ok(())
}
