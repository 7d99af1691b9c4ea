use strata_core::{DType, Device, Generator, Tensor};

use super::*;

fn values(t: &Tensor) -> Vec<f64> {
    t.to(DType::F64).unwrap().to_vec::<f64>().unwrap()
}

fn mean_var(v: &[f64]) -> (f64, f64) {
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n;
    (mean, var)
}

#[test]
fn uniform_stays_in_bounds_with_the_right_moments() {
    let t = Tensor::zeros(&[200, 100], DType::F32).unwrap();
    let mut g = Generator::new(1);
    uniform_(&t, -2.0, 4.0, Some(&mut g)).unwrap();
    let v = values(&t);
    assert!(v.iter().all(|x| (-2.0..4.0).contains(x)));
    let (m, var) = mean_var(&v);
    assert!((m - 1.0).abs() < 0.05, "{m}");
    assert!((var - 3.0).abs() < 0.1, "{var}"); // (b - a)² / 12
    assert!(uniform_(&t, 1.0, 0.0, None).is_err());
    let ints = Tensor::zeros(&[2], DType::I64).unwrap();
    assert!(uniform_(&ints, 0.0, 1.0, None).is_err());
}

#[test]
fn normal_has_the_requested_moments_and_the_generator_repeats() {
    let t = Tensor::zeros(&[20000], DType::F64).unwrap();
    normal_(&t, 3.0, 0.5, Some(&mut Generator::new(5))).unwrap();
    let first = values(&t);
    let (m, var) = mean_var(&first);
    assert!(
        (m - 3.0).abs() < 0.02 && (var - 0.25).abs() < 0.01,
        "{m} {var}"
    );
    normal_(&t, 3.0, 0.5, Some(&mut Generator::new(5))).unwrap();
    assert_eq!(values(&t), first);
}

#[test]
fn constants() {
    let t = Tensor::zeros(&[3], DType::BF16).unwrap();
    ones_(&t).unwrap();
    assert_eq!(values(&t), [1.0; 3]);
    constant_(&t, 2.5).unwrap();
    assert_eq!(values(&t), [2.5; 3]);
    zeros_(&t).unwrap();
    assert_eq!(values(&t), [0.0; 3]);
}

#[test]
fn initialisers_write_in_place_into_parameters_without_recording() {
    let p = Tensor::zeros(&[4, 4], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let ptr = p.data_ptr();
    xavier_uniform_(&p, 1.0, None).unwrap();
    assert_eq!(p.data_ptr(), ptr);
    assert!(p.is_leaf() && p.requires_grad());
}

#[test]
fn kaiming_and_xavier_bounds_and_variances() {
    let w = Tensor::zeros(&[256, 64, 3, 3], DType::F32).unwrap();
    let fan_in = 64.0 * 9.0;
    let a = 5f64.sqrt();
    kaiming_uniform_(&w, a, FanMode::FanIn, Nonlinearity::LeakyRelu(a), None).unwrap();
    let v = values(&w);
    let bound = 1.0 / f64::sqrt(fan_in);
    assert!(v.iter().all(|x| x.abs() <= bound + 1e-7));
    let (_, var) = mean_var(&v);
    assert!((var / (bound * bound / 3.0) - 1.0).abs() < 0.05, "{var}");

    kaiming_normal_(&w, 0.0, FanMode::FanOut, Nonlinearity::Relu, None).unwrap();
    let (m, var) = mean_var(&values(&w));
    let want = 2.0 / (256.0 * 9.0);
    assert!(
        m.abs() < 1e-3 && (var / want - 1.0).abs() < 0.05,
        "{m} {var}"
    );

    let w = Tensor::zeros(&[300, 200], DType::F32).unwrap();
    xavier_uniform_(&w, 2.0, None).unwrap();
    let bound = 2.0 * (6.0f64 / 500.0).sqrt();
    assert!(values(&w).iter().all(|x| x.abs() <= bound + 1e-6));
    xavier_normal_(&w, 1.0, None).unwrap();
    let (_, var) = mean_var(&values(&w));
    assert!((var / (2.0 / 500.0) - 1.0).abs() < 0.05, "{var}");
    let v = Tensor::zeros(&[5], DType::F32).unwrap();
    assert!(xavier_uniform_(&v, 1.0, None).is_err());
}

#[test]
fn trunc_normal_stays_inside_its_interval() {
    let t = Tensor::zeros(&[10000], DType::F32).unwrap();
    trunc_normal_(&t, 0.0, 1.0, -0.5, 2.0, Some(&mut Generator::new(3))).unwrap();
    let v = values(&t);
    assert!(v.iter().all(|x| (-0.5..=2.0).contains(x)));
    let (m, _) = mean_var(&v);
    // The mean of N(0, 1) truncated to [-0.5, 2]: (φ(-0.5) - φ(2)) / (Φ(2) - Φ(-0.5)).
    assert!((m - 0.4458).abs() < 0.03, "{m}");
    assert!(trunc_normal_(&t, 0.0, 1.0, 9.0, 10.0, None).is_err());
}

#[test]
fn orthogonal_rows_or_columns() {
    for shape in [[6usize, 4], [4, 6]] {
        let t = Tensor::zeros(&shape, DType::F64).unwrap();
        orthogonal_(&t, 2.0, Some(&mut Generator::new(9))).unwrap();
        let q = t.div(2.0).unwrap();
        let gram = if shape[0] >= shape[1] {
            q.t().unwrap().matmul(&q).unwrap()
        } else {
            q.matmul(&q.t().unwrap()).unwrap()
        };
        let n = shape[0].min(shape[1]);
        let g = gram.to_vec::<f64>().unwrap();
        for i in 0..n {
            for j in 0..n {
                let want = if i == j { 1.0 } else { 0.0 };
                assert!((g[i * n + j] - want).abs() < 1e-9, "{shape:?} ({i},{j})");
            }
        }
    }
}

#[test]
fn meta_tensors_are_accepted_and_nothing_is_drawn() {
    let t = Tensor::on(Device::Meta).zeros(&[8, 8], DType::F32).unwrap();
    kaiming_uniform_(&t, 0.0, FanMode::FanIn, Nonlinearity::Relu, None).unwrap();
    orthogonal_(&t, 1.0, None).unwrap();
    trunc_normal_(&t, 0.0, 1.0, -2.0, 2.0, None).unwrap();
}

#[test]
fn gains_and_fans() {
    assert_eq!(calculate_gain(Nonlinearity::Tanh), 5.0 / 3.0);
    assert!(
        (calculate_gain(Nonlinearity::LeakyRelu(5f64.sqrt())) - (1.0f64 / 3.0).sqrt()).abs()
            < 1e-12
    );
    let w = Tensor::zeros(&[8, 3, 5, 5], DType::F32).unwrap();
    assert_eq!(calculate_fan_in_and_fan_out(&w).unwrap(), (75, 200));
}
