//! gru_layer's fused node against a loop of gru_cells: values, every input's gradient with
//! each choice of biases, a retained graph, finite differences, f32, autocast and bad
//! shapes.

use super::{close, f32_copies, gradcheck, input_grads, leaf, weighted_sum};
use crate::autocast::autocast;
use crate::nn::functional::{gru_cell, gru_layer};
use crate::{DType, Result, Tensor};

/// `[x, h0, w_ih, w_hh, b_ih, b_hh]` for `steps` steps of a batch of 3, 4 inputs and 5
/// hidden units.
fn inputs(steps: usize) -> Vec<Tensor> {
    let (b, i, h) = (3, 4, 5);
    vec![
        leaf(&[steps, b, i], 21),
        leaf(&[b, h], 22),
        leaf(&[3 * h, i], 23),
        leaf(&[3 * h, h], 24),
        leaf(&[3 * h], 25),
        leaf(&[3 * h], 26),
    ]
}

/// Which biases take part: `(b_ih, b_hh)`.
type Biases = (bool, bool);

fn biases(t: &[Tensor], (bi, bh): Biases) -> (Option<&Tensor>, Option<&Tensor>) {
    (bi.then(|| &t[4]), bh.then(|| &t[5]))
}

fn fused(t: &[Tensor], with: Biases) -> Result<Vec<Tensor>> {
    let (b_ih, b_hh) = biases(t, with);
    let (out, h) = gru_layer(&t[0], &t[1], &t[2], &t[3], b_ih, b_hh)?;
    Ok(vec![out, h])
}

fn looped(t: &[Tensor], with: Biases) -> Result<Vec<Tensor>> {
    let (b_ih, b_hh) = biases(t, with);
    let mut h = t[1].clone();
    let mut outs = Vec::new();
    for s in 0..t[0].shape()[0] {
        h = gru_cell(&t[0].select(0, s)?, &h, &t[2], &t[3], b_ih, b_hh)?;
        outs.push(h.clone());
    }
    Ok(vec![Tensor::stack(&outs.iter().collect::<Vec<_>>(), 0)?, h])
}

/// Every input's gradient, `None` for a bias left out.
fn grads(
    t: &[Tensor],
    with: Biases,
    f: fn(&[Tensor], Biases) -> Result<Vec<Tensor>>,
) -> Vec<Option<Vec<f64>>> {
    input_grads(t, |t| f(t, with))
}

/// Both gradients absent, or both present and within `tol`.
fn same(got: &[Option<Vec<f64>>], want: &[Option<Vec<f64>>], tol: f64) {
    assert_eq!(got.len(), want.len());
    for (g, w) in got.iter().zip(want) {
        match (g, w) {
            (Some(g), Some(w)) => close(g, w, tol),
            (None, None) => {}
            _ => panic!("one path has a gradient the other lacks: {g:?} vs {w:?}"),
        }
    }
}

#[test]
fn fused_layer_matches_a_loop_of_cells_with_every_gradient() {
    for steps in [1, 2, 6] {
        for with in [(true, true), (false, false), (true, false), (false, true)] {
            let t = inputs(steps);
            let got = fused(&t, with).unwrap();
            let want = looped(&t, with).unwrap();
            assert_eq!(got[0].shape(), want[0].shape());
            assert!(got[0].is_contiguous());
            for (g, w) in got.iter().zip(&want) {
                close(
                    &g.to_vec::<f64>().unwrap(),
                    &w.to_vec::<f64>().unwrap(),
                    1e-12,
                );
            }
            let (got, want) = (grads(&t, with, fused), grads(&t, with, looped));
            same(&got, &want, 1e-11);
            // Exactly the inputs that take part have gradients.
            let present: Vec<bool> = got.iter().map(Option::is_some).collect();
            assert_eq!(present, [true, true, true, true, with.0, with.1]);
        }
    }
}

#[test]
fn a_retained_graph_gives_the_same_gradients_twice() {
    // With the graph kept, the gates' gradients go to a buffer of their own: the saved
    // workspaces stay intact for the second pass (without it, they are overwritten).
    let t = inputs(4);
    let with = (true, true);
    let once = grads(&t, with, fused);
    for x in &t {
        x.zero_grad(true).unwrap();
    }
    let l = weighted_sum(&fused(&t, with).unwrap()).unwrap();
    l.backward_with(None, true).unwrap();
    l.backward_with(None, false).unwrap();
    for (x, g) in t.iter().zip(&once) {
        let twice: Vec<f64> = g.as_ref().unwrap().iter().map(|v| 2.0 * v).collect();
        close(&x.grad().unwrap().to_vec::<f64>().unwrap(), &twice, 1e-11);
    }
    let e = l.backward().unwrap_err().to_string();
    assert!(e.contains("retain_graph"), "{e}");
}

#[test]
fn fused_layer_passes_finite_differences() {
    let t = inputs(3);
    gradcheck(|t| weighted_sum(&fused(t, (true, true))?), &t);
}

#[test]
fn fused_layer_in_f32_agrees_with_the_cells() {
    let t = f32_copies(&inputs(5), true);
    let with = (true, true);
    let (got, want) = (fused(&t, with).unwrap(), looped(&t, with).unwrap());
    for (g, w) in got.iter().zip(&want) {
        close(
            &g.to_vec::<f64>().unwrap(),
            &w.to_vec::<f64>().unwrap(),
            1e-5,
        );
    }
    same(&grads(&t, with, fused), &grads(&t, with, looped), 1e-4);
}

#[test]
fn under_autocast_the_layer_runs_as_cells() {
    let t = f32_copies(&inputs(2), false);
    let _region = autocast(DType::BF16).unwrap();
    let got = fused(&t, (true, true)).unwrap();
    let want = looped(&t, (true, true)).unwrap();
    assert_eq!(got[0].dtype(), want[0].dtype());
    assert_eq!(
        got[0].to_vec::<f32>().unwrap(),
        want[0].to_vec::<f32>().unwrap()
    );
    assert_eq!(got[1].shape().as_slice(), [3, 5]);
}

#[test]
fn bad_shapes_are_errors_naming_them() {
    let t = inputs(2);
    let flat = t[0].select(0, 0).unwrap();
    let e = gru_layer(&flat, &t[1], &t[2], &t[3], None, None).unwrap_err();
    assert!(e.to_string().contains("[T, B, input_size]"), "{e}");
    let short = Tensor::zeros(&[7], DType::F64).unwrap();
    let e = gru_layer(&t[0], &t[1], &t[2], &t[3], None, Some(&short)).unwrap_err();
    assert!(e.to_string().contains("a bias must be [15]"), "{e}");
    let lstm_weights = Tensor::zeros(&[20, 4], DType::F64).unwrap();
    let e = gru_layer(&t[0], &t[1], &lstm_weights, &t[3], None, None).unwrap_err();
    assert!(e.to_string().contains("[15, 4]"), "{e}");
    let (out, h) = gru_layer(
        &t[0].narrow(0, 0, 0).unwrap(),
        &t[1],
        &t[2],
        &t[3],
        None,
        None,
    )
    .unwrap();
    assert_eq!(out.shape().as_slice(), [0, 3, 5]);
    assert_eq!(h.shape(), t[1].shape());
}
