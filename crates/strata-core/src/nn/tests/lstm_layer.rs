//! lstm_layer's fused node against a loop of lstm_cells: values, every input's gradient,
//! finite differences, f32, autocast and bad shapes.

use super::{close, f32_copies, gradcheck, input_grads, leaf, weighted_sum};
use crate::autocast::autocast;
use crate::nn::functional::{lstm_cell, lstm_layer};
use crate::{DType, Result, Tensor};

/// `[x, h0, c0, w_ih, w_hh, b_ih, b_hh]` for `steps` steps of a batch of 3, 4 inputs and 5
/// hidden units.
fn inputs(steps: usize) -> Vec<Tensor> {
    let (b, i, h) = (3, 4, 5);
    vec![
        leaf(&[steps, b, i], 1),
        leaf(&[b, h], 2),
        leaf(&[b, h], 3),
        leaf(&[4 * h, i], 4),
        leaf(&[4 * h, h], 5),
        leaf(&[4 * h], 6),
        leaf(&[4 * h], 7),
    ]
}

fn fused(t: &[Tensor]) -> Result<(Tensor, Tensor, Tensor)> {
    lstm_layer(&t[0], &t[1], &t[2], &t[3], &t[4], t.get(5), t.get(6))
}

fn looped(t: &[Tensor]) -> Result<(Tensor, Tensor, Tensor)> {
    let (mut h, mut c) = (t[1].clone(), t[2].clone());
    let mut outs = Vec::new();
    for s in 0..t[0].shape()[0] {
        (h, c) = lstm_cell(
            &t[0].select(0, s)?,
            &h,
            &c,
            &t[3],
            &t[4],
            t.get(5),
            t.get(6),
        )?;
        outs.push(h.clone());
    }
    Ok((Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0)?, h, c))
}

fn loss((out, h, c): (Tensor, Tensor, Tensor)) -> Result<Tensor> {
    weighted_sum(&[out, h, c])
}

fn grads(t: &[Tensor], f: impl Fn(&[Tensor]) -> Result<(Tensor, Tensor, Tensor)>) -> Vec<Vec<f64>> {
    input_grads(t, |t| f(t).map(|(out, h, c)| vec![out, h, c]))
        .into_iter()
        .map(|g| g.expect("a gradient"))
        .collect()
}

#[test]
fn fused_layer_matches_a_loop_of_cells_with_every_gradient() {
    for steps in [1, 2, 6] {
        for with_biases in [true, false] {
            let t = inputs(steps);
            let t = &t[..if with_biases { 7 } else { 5 }];
            let (out, h, c) = fused(t).unwrap();
            let (wo, wh, wc) = looped(t).unwrap();
            assert_eq!(out.shape(), wo.shape());
            assert!(out.is_contiguous());
            for (got, want) in [(&out, &wo), (&h, &wh), (&c, &wc)] {
                close(
                    &got.to_vec::<f64>().unwrap(),
                    &want.to_vec::<f64>().unwrap(),
                    1e-12,
                );
            }
            let (got, want) = (grads(t, fused), grads(t, looped));
            for (g, w) in got.iter().zip(&want) {
                close(g, w, 1e-11);
            }
        }
    }
}

#[test]
fn a_retained_graph_gives_the_same_gradients_twice() {
    // With the graph kept, the gates' gradients go to a buffer of their own: the saved
    // gates stay intact for the second pass (without it, they are overwritten).
    let t = inputs(4);
    let once = grads(&t, fused);
    for x in &t {
        x.zero_grad(true).unwrap();
    }
    let l = loss(fused(&t).unwrap()).unwrap();
    l.backward_with(None, true).unwrap();
    l.backward_with(None, false).unwrap();
    for (x, g) in t.iter().zip(&once) {
        let twice: Vec<f64> = g.iter().map(|v| 2.0 * v).collect();
        close(&x.grad().unwrap().to_vec::<f64>().unwrap(), &twice, 1e-11);
    }
    let e = l.backward().unwrap_err().to_string();
    assert!(e.contains("retain_graph"), "{e}");
}

#[test]
fn fused_layer_passes_finite_differences() {
    let t = inputs(3);
    gradcheck(|t| fused(t).and_then(loss), &t);
}

#[test]
fn fused_layer_in_f32_agrees_with_the_cells() {
    let t = f32_copies(&inputs(5), true);
    let (out, h, c) = fused(&t).unwrap();
    let (wo, wh, wc) = looped(&t).unwrap();
    for (got, want) in [(&out, &wo), (&h, &wh), (&c, &wc)] {
        close(
            &got.to_vec::<f64>().unwrap(),
            &want.to_vec::<f64>().unwrap(),
            1e-5,
        );
    }
    for (g, w) in grads(&t, fused).iter().zip(&grads(&t, looped)) {
        close(g, w, 1e-4);
    }
}

#[test]
fn under_autocast_the_layer_runs_as_cells() {
    let t = f32_copies(&inputs(2), false);
    let _region = autocast(DType::BF16).unwrap();
    let (out, h, _) = fused(&t).unwrap();
    let (wo, ..) = looped(&t).unwrap();
    assert_eq!(out.dtype(), wo.dtype());
    assert_eq!(out.to_vec::<f32>().unwrap(), wo.to_vec::<f32>().unwrap());
    assert_eq!(h.shape().as_slice(), [3, 5]);
}

#[test]
fn bad_shapes_are_errors_naming_them() {
    let t = inputs(2);
    let flat = t[0].select(0, 0).unwrap();
    let e = lstm_layer(&flat, &t[1], &t[2], &t[3], &t[4], None, None).unwrap_err();
    assert!(e.to_string().contains("[T, B, input_size]"), "{e}");
    let short = Tensor::zeros(&[7], DType::F64).unwrap();
    let e = lstm_layer(&t[0], &t[1], &t[2], &t[3], &t[4], Some(&short), None).unwrap_err();
    assert!(e.to_string().contains("a bias must be [20]"), "{e}");
    let (out, h, _) = lstm_layer(
        &t[0].narrow(0, 0, 0).unwrap(),
        &t[1],
        &t[2],
        &t[3],
        &t[4],
        None,
        None,
    )
    .unwrap();
    assert_eq!(out.shape().as_slice(), [0, 3, 5]);
    assert_eq!(h.shape(), t[1].shape());
}
