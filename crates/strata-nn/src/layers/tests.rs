use strata_core::{DType, Tensor};

use super::*;
use crate::Module;

fn max_abs(t: &Tensor) -> f64 {
    t.to(DType::F64)
        .unwrap()
        .to_vec::<f64>()
        .unwrap()
        .iter()
        .fold(0.0, |m, v| m.max(v.abs()))
}

fn names(m: &impl Module) -> Vec<String> {
    m.named_parameters().into_iter().map(|(n, _)| n).collect()
}

#[test]
fn linear_defaults_and_forward() {
    let l = Linear::new(50, 20, true).unwrap();
    assert_eq!(names(&l), ["weight", "bias"]);
    let bound = 1.0 / 50f64.sqrt();
    assert!(max_abs(&l.weight()) <= bound && max_abs(&l.bias().unwrap()) <= bound);
    // Not all equal: they were drawn.
    assert!(max_abs(&l.weight()) > bound / 2.0);
    let y = l
        .call(&Tensor::ones(&[7, 50], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape().as_slice(), [7, 20]);
    assert_eq!(names(&Linear::new(2, 2, false).unwrap()), ["weight"]);
}

#[test]
fn conv_fan_in_counts_groups_and_kernel() {
    let config = Conv2dConfig {
        groups: 2,
        ..Conv2dConfig::default()
    };
    let c = Conv2d::with_config(4, 6, 3, config).unwrap();
    assert_eq!(c.weight().shape().as_slice(), [6, 2, 3, 3]);
    let bound = 1.0 / (2.0f64 * 9.0).sqrt();
    assert!(max_abs(&c.weight()) <= bound && max_abs(&c.bias().unwrap()) <= bound);
    assert!(Conv2d::with_config(3, 6, 3, config).is_err());
    let plain = Conv2d::with_config(
        3,
        5,
        3,
        Conv2dConfig {
            padding: 1.into(),
            ..Conv2dConfig::default()
        },
    )
    .unwrap();
    let y = plain
        .call(&Tensor::ones(&[2, 3, 8, 8], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape().as_slice(), [2, 5, 8, 8]);
}

#[test]
fn activations_and_shapes() {
    let x = Tensor::from_vec(vec![-1.0f32, 0.0, 2.0, 3.0], &[2, 2]).unwrap();
    assert_eq!(
        ReLU::new().call(&x).unwrap().to_vec::<f32>().unwrap(),
        [0.0, 0.0, 2.0, 3.0]
    );
    for m in [
        Box::new(GELU::new()) as Box<dyn Module>,
        Box::new(SiLU::new()),
        Box::new(Tanh::new()),
        Box::new(Sigmoid::new()),
        Box::new(Softmax::new(-1)),
        Box::new(LogSoftmax::new(1)),
    ] {
        assert_eq!(m.call(&x).unwrap().shape().as_slice(), [2, 2]);
    }
    // GELU's two forms differ slightly away from 0, as PyTorch's do (at 2: 1.954500 exact,
    // 1.954598 tanh).
    let exact = GELU::new().call(&x).unwrap().to_vec::<f32>().unwrap();
    let tanh = GELU::tanh();
    assert_eq!(tanh.approximate(), GeluApproximate::Tanh);
    let approx = tanh.call(&x).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(approx, x.gelu_tanh().unwrap().to_vec::<f32>().unwrap());
    assert!((exact[2] - approx[2]).abs() > 1e-6 && (exact[2] - approx[2]).abs() < 1e-3);
    let rows = Softmax::new(1)
        .call(&x)
        .unwrap()
        .sum(Some(&[1]), false)
        .unwrap();
    for v in rows.to_vec::<f32>().unwrap() {
        assert!((v - 1.0).abs() < 1e-6);
    }
    let f = Flatten::new()
        .call(&Tensor::ones(&[2, 3, 4], DType::F32).unwrap())
        .unwrap();
    assert_eq!(f.shape().as_slice(), [2, 12]);
    let p = MaxPool2d::new(2)
        .call(&Tensor::ones(&[1, 1, 4, 4], DType::F32).unwrap())
        .unwrap();
    assert_eq!(p.shape().as_slice(), [1, 1, 2, 2]);
}

#[test]
fn dropout_follows_the_training_flag() {
    let d = Dropout::new(0.5).unwrap();
    let x = Tensor::ones(&[1000], DType::F32).unwrap();
    let y = d.call(&x).unwrap().to_vec::<f32>().unwrap();
    assert!(y.iter().all(|&v| v == 0.0 || v == 2.0));
    assert!(y.contains(&0.0));
    d.eval();
    assert_eq!(
        d.call(&x).unwrap().to_vec::<f32>().unwrap(),
        vec![1.0; 1000]
    );
    assert!(Dropout::new(1.5).is_err());
}

#[test]
fn layer_norm_defaults() {
    let ln = LayerNorm::new(&[4]).unwrap();
    assert_eq!(names(&ln), ["weight", "bias"]);
    assert_eq!(ln.parameters()[0].to_vec::<f32>().unwrap(), [1.0; 4]);
    let y = ln
        .call(
            &Tensor::arange(8, DType::F32)
                .unwrap()
                .view(&[2, 4])
                .unwrap(),
        )
        .unwrap();
    let m = y.mean(Some(&[1]), false).unwrap().to_vec::<f32>().unwrap();
    assert!(m.iter().all(|v| v.abs() < 1e-5));
    assert!(LayerNorm::with_options(&[4], 1e-5, false)
        .unwrap()
        .parameters()
        .is_empty());
}

#[test]
fn embedding_padding_row_is_zero() {
    let e = Embedding::new(10, 3, Some(-1)).unwrap();
    assert_eq!(e.padding_idx(), Some(9));
    let w = e.weight();
    assert_eq!(w.select(0, 9).unwrap().to_vec::<f32>().unwrap(), [0.0; 3]);
    assert!(max_abs(&w) > 0.0);
    let idx = Tensor::from_vec(vec![9i64, 1], &[2]).unwrap();
    let y = e.call(&idx).unwrap();
    assert_eq!(y.shape().as_slice(), [2, 3]);
    assert!(Embedding::new(10, 3, Some(10)).is_err());
}

#[test]
fn batch_norm_tracks_running_statistics_and_uses_them_in_eval() {
    let bn = BatchNorm1d::new(2).unwrap();
    let names: Vec<String> = bn.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        ["running_mean", "running_var", "num_batches_tracked"]
    );
    assert_eq!(bn.num_batches_tracked().dtype(), DType::I64);
    // Channel 0: 1, 3, 5, 7 (mean 4, unbiased var 20/3); channel 1: all 2.
    let x = Tensor::from_vec(vec![1.0f32, 2.0, 3.0, 2.0, 5.0, 2.0, 7.0, 2.0], &[4, 2]).unwrap();
    let y = bn.call(&x).unwrap();
    let col0: Vec<f32> = y.select(1, 0).unwrap().to_vec().unwrap();
    let s = (5.0f32 + 1e-5).sqrt();
    for (got, want) in col0.iter().zip([-3.0 / s, -1.0 / s, 1.0 / s, 3.0 / s]) {
        assert!((got - want).abs() < 1e-5, "{got} {want}");
    }
    assert_eq!(bn.num_batches_tracked().item::<i64>().unwrap(), 1);
    let rm = bn.running_mean().to_vec::<f32>().unwrap();
    let rv = bn.running_var().to_vec::<f32>().unwrap();
    assert!(
        (rm[0] - 0.4).abs() < 1e-6 && (rm[1] - 0.2).abs() < 1e-6,
        "{rm:?}"
    );
    assert!(
        (rv[0] - (0.9 + 0.1 * 20.0 / 3.0)).abs() < 1e-5 && (rv[1] - 0.9).abs() < 1e-6,
        "{rv:?}"
    );

    bn.eval();
    let y = bn.call(&x).unwrap().to_vec::<f32>().unwrap();
    let want0 = (1.0 - rm[0]) / (rv[0] + 1e-5).sqrt();
    assert!((y[0] - want0).abs() < 1e-5);
    assert_eq!(bn.num_batches_tracked().item::<i64>().unwrap(), 1);

    bn.train();
    assert!(bn
        .call(&Tensor::ones(&[1, 2], DType::F32).unwrap())
        .is_err());
    assert!(bn
        .call(&Tensor::ones(&[4, 3], DType::F32).unwrap())
        .is_err());
    let bn2 = BatchNorm2d::new(3).unwrap();
    let y = bn2
        .call(&Tensor::randn(&[2, 3, 4, 4], DType::F32).unwrap())
        .unwrap();
    assert_eq!(y.shape().as_slice(), [2, 3, 4, 4]);
    assert!(bn2
        .call(&Tensor::ones(&[2, 3], DType::F32).unwrap())
        .is_err());
}

#[test]
fn grouped_and_dilated_convolutions_match_their_definitions() {
    let x = Tensor::randn(&[1, 4, 7, 7], DType::F32).unwrap();
    // Groups: the same as two separate convolutions on the halves.
    let config = Conv2dConfig {
        groups: 2,
        ..Conv2dConfig::default()
    };
    let g = Conv2d::with_config(4, 2, 3, config).unwrap();
    let y = g.call(&x).unwrap();
    assert_eq!(y.shape().as_slice(), [1, 2, 5, 5]);
    let w = g.weight();
    let b = g.bias().unwrap();
    for k in 0..2i64 {
        let xk = x.narrow(1, 2 * k, 2).unwrap();
        let wk = w.narrow(0, k, 1).unwrap();
        let bk = b.narrow(0, k, 1).unwrap();
        let want = strata_core::nn::functional::conv2d(&xk, &wk, Some(&bk), 1, 0).unwrap();
        let got = y.narrow(1, k, 1).unwrap();
        for (a, b) in got
            .to_vec::<f32>()
            .unwrap()
            .iter()
            .zip(want.to_vec::<f32>().unwrap())
        {
            assert!((a - b).abs() < 1e-5);
        }
    }
    // Dilation 2 with a 2x2 kernel reads x[i, j], x[i, j+2], x[i+2, j], x[i+2, j+2].
    let d = Conv2d::with_config(
        1,
        1,
        2,
        Conv2dConfig {
            dilation: 2.into(),
            bias: false,
            ..Conv2dConfig::default()
        },
    )
    .unwrap();
    strata_core::autograd::no_grad(|| d.weight().fill_(1.0)).unwrap();
    let x = Tensor::arange(16, DType::F32)
        .unwrap()
        .view(&[1, 1, 4, 4])
        .unwrap();
    let y = d.call(&x).unwrap();
    assert_eq!(y.shape().as_slice(), [1, 1, 2, 2]);
    assert_eq!(y.to_vec::<f32>().unwrap(), [20.0, 24.0, 36.0, 40.0]);
}

#[test]
fn embedding_padding_row_gets_no_gradient() {
    let e = Embedding::new(4, 2, Some(0)).unwrap();
    let idx = Tensor::from_vec(vec![0i64, 2, 0, 3], &[2, 2]).unwrap();
    e.call(&idx)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let g = e.weight().grad().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(g, [0.0, 0.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0]);
}
