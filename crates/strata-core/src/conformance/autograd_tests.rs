//! Backward behaviour: overwritten values, saved numbers, masks selected rather than
//! multiplied.

use crate::{Scalar, Tensor};

fn leaf(v: &[f32]) -> Tensor {
    Tensor::from_vec(v.to_vec(), &[v.len()])
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

#[test]
fn overwriting_writes_keep_the_graph_with_a_zero_gradient() {
    for which in 0..3 {
        let x = leaf(&[1.0, 2.0]);
        let y = x.mul(2i64).unwrap();
        match which {
            0 => y.zero_().unwrap(),
            1 => y.fill_(3i64).unwrap(),
            _ => y
                .copy_(&Tensor::from_vec(vec![5.0f32, 6.0], &[2]).unwrap())
                .unwrap(),
        };
        let s = y.sum(None, false).unwrap();
        s.backward_with(None, true).unwrap();
        assert_eq!(x.grad().unwrap().to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    }
    // The node that made the overwritten values is visited, so its saved output is checked.
    let x = leaf(&[1.0, 2.0]);
    let y = x.exp().unwrap();
    y.zero_().unwrap();
    assert!(y.sum(None, false).unwrap().backward().is_err());
}

#[test]
fn multiplying_by_a_number_saves_it() {
    for div in [false, true] {
        let x = leaf(&[1.0, 2.0]);
        let y = if div { x.div(2i64) } else { x.mul(2.5f64) }.unwrap();
        let s = y.sum(None, false).unwrap();
        s.backward().unwrap();
        assert!(s.backward().is_err());
    }
    let x = leaf(&[1.0, 2.0]);
    let s = x.add(2i64).unwrap().sum(None, false).unwrap();
    s.backward().unwrap();
    assert!(s.backward().is_ok());
}

#[test]
fn relu_and_clamp_select_the_gradient() {
    let x = leaf(&[0.0, -1.0, 4.0]);
    let s = x.relu().unwrap().sqrt().unwrap().sum(None, false).unwrap();
    s.backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 0.0, 0.25]
    );
    let x = leaf(&[0.0, 1.0, 0.5, -1.0, 2.0]);
    let y = x.clamp(Some(Scalar::Int(0)), Some(Scalar::Int(1))).unwrap();
    y.sum(None, false).unwrap().backward().unwrap();
    assert_eq!(
        x.grad().unwrap().to_vec::<f32>().unwrap(),
        vec![0.0, 0.0, 1.0, 0.0, 0.0]
    );
    // A NaN output passes its gradient (PyTorch zeroes only where the output is <= 0).
    let x = leaf(&[f32::NAN, 1.0]);
    x.relu()
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let g = x.grad().unwrap().to_vec::<f32>().unwrap();
    assert_eq!(g[0], 1.0);
    assert_eq!(g[1], 1.0);
}
