//! Autograd unit tests: every backward formula against finite differences, and the rules
//! users rely on (freeing, version checks, in-place on views, hooks, modes).

use super::*;
use crate::{DType, Error, Result, Tensor};

fn t64(v: &[f64], shape: &[usize]) -> Tensor {
    Tensor::from_vec(v.to_vec(), shape)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
}

fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut g = crate::Generator::new(seed);
    (0..n).map(|_| g.next_f64() * 2.0 - 1.0).collect()
}

fn x(shape: &[usize], seed: u64) -> Tensor {
    t64(&vals(shape.iter().product(), seed), shape)
}

fn pos(shape: &[usize], seed: u64) -> Tensor {
    let v: Vec<f64> = vals(shape.iter().product(), seed)
        .into_iter()
        .map(|a| a.abs() + 0.5)
        .collect();
    t64(&v, shape)
}

fn check(f: impl Fn(&[Tensor]) -> Result<Tensor>, inputs: Vec<Tensor>) {
    gradcheck(f, &inputs, GradcheckOptions::default()).unwrap();
}

#[test]
fn binary_formulas_with_broadcasting() {
    let (a, b) = (x(&[3, 4], 1), pos(&[4], 2));
    check(|t| t[0].add_scaled(&t[1], 2.5), vec![a.clone(), b.clone()]);
    check(|t| t[0].sub_scaled(&t[1], 0.5), vec![a.clone(), b.clone()]);
    check(|t| t[0].mul(&t[1]), vec![a.clone(), b.clone()]);
    check(|t| t[0].div(&t[1]), vec![a.clone(), b.clone()]);
    check(|t| t[1].pow(&t[0]), vec![a.clone(), b.clone()]);
    check(|t| t[0].pow(3.0), vec![b.clone()]);
    check(|t| t[0].maximum(&t[1]), vec![a.clone(), b.clone()]);
    check(|t| t[0].minimum(&t[1]), vec![a.clone(), b.clone()]);
    check(|t| t[0].mul(2.0)?.div(3.0)?.sub(1.0), vec![a.clone()]);
    let c = Tensor::from_vec(vec![true, false, true, false], &[4]).unwrap();
    check(
        move |t| Tensor::where_cond(&c, &t[0], &t[1]),
        vec![a.clone(), b.clone()],
    );
    check(|t| t[0].addcmul(&t[1], &t[0], 0.7), vec![a, b]);
}

#[test]
fn unary_formulas() {
    let a = x(&[2, 5], 3);
    let p = pos(&[2, 5], 4);
    for f in [
        Tensor::neg,
        Tensor::abs,
        Tensor::exp,
        Tensor::sin,
        Tensor::cos,
        Tensor::tanh,
        Tensor::sigmoid,
        Tensor::relu,
        Tensor::gelu,
        Tensor::silu,
    ] {
        check(move |t| f(&t[0]), vec![a.clone()]);
    }
    for f in [Tensor::log, Tensor::sqrt, Tensor::rsqrt] {
        check(move |t| f(&t[0]), vec![p.clone()]);
    }
    check(
        |t| t[0].clamp(Some((-0.3).into()), Some(0.4.into())),
        vec![a.clone()],
    );
}

#[test]
fn reduction_formulas() {
    let a = x(&[3, 4, 2], 5);
    check(|t| t[0].sum(Some(&[1]), false), vec![a.clone()]);
    check(|t| t[0].sum(None, false), vec![a.clone()]);
    check(|t| t[0].mean(Some(&[0, 2]), true), vec![a.clone()]);
    check(|t| t[0].prod(Some(&[1]), false), vec![a.clone()]);
    check(|t| t[0].amax(Some(&[2]), false), vec![a.clone()]);
    check(|t| t[0].amin(None, false), vec![a.clone()]);
    check(|t| t[0].logsumexp(Some(&[1]), false), vec![a.clone()]);
    check(|t| t[0].var(Some(&[1]), 1.0, false), vec![a.clone()]);
    check(|t| t[0].std(Some(&[0]), 0.0, true), vec![a.clone()]);
    check(|t| t[0].norm(2.0, Some(&[1]), false), vec![a.clone()]);
    check(|t| t[0].norm(3.0, None, false), vec![a.clone()]);
    check(|t| t[0].norm(1.0, Some(&[2]), false), vec![a.clone()]);
    check(|t| Ok(t[0].max_dim(1, false)?.0), vec![a.clone()]);
    check(|t| Ok(t[0].min_dim(-1, true)?.0), vec![a.clone()]);
    check(|t| t[0].softmax(1), vec![a.clone()]);
    check(|t| t[0].log_softmax(-1), vec![a.clone()]);
    check(|t| t[0].cumsum(1), vec![a.clone()]);
    // The forward of a p-norm over many elements (folded in lanes) matches a direct sum.
    let v = a.to_vec::<f64>().unwrap();
    for p in [2.0, 3.0] {
        let direct = v.iter().map(|e| e.abs().powf(p)).sum::<f64>().powf(1.0 / p);
        let got = a.norm(p, None, false).unwrap().item::<f64>().unwrap();
        assert!((got - direct).abs() < 1e-12, "p={p}: {got} vs {direct}");
    }
    // prod with a zero in the group takes the slow, division-free path.
    let z = t64(&[0.0, 2.0, 3.0, 1.5], &[2, 2]);
    check(|t| t[0].prod(Some(&[1]), false), vec![z]);
}

#[test]
fn matrix_product_formulas() {
    let (m, n) = (x(&[3, 4], 6), x(&[4, 2], 7));
    check(|t| t[0].mm(&t[1]), vec![m.clone(), n.clone()]);
    check(|t| t[0].matmul(&t[1]), vec![m.clone(), n.clone()]);
    let v = x(&[4], 8);
    check(|t| t[0].matmul(&t[1]), vec![m.clone(), v.clone()]);
    check(|t| t[1].matmul(&t[0]), vec![n.clone(), v.clone()]);
    check(|t| t[0].matmul(&t[0]), vec![v.clone()]);
    check(|t| t[0].dot(&t[1]), vec![v.clone(), x(&[4], 9)]);
    check(|t| t[0].outer(&t[1]), vec![v.clone(), x(&[3], 10)]);
    let (ba, bb) = (x(&[2, 3, 4], 11), x(&[2, 4, 2], 12));
    check(|t| t[0].bmm(&t[1]), vec![ba.clone(), bb.clone()]);
    check(|t| t[0].matmul(&t[1]), vec![ba, n.clone()]);
    let bv = x(&[5, 1, 3, 4], 13);
    check(|t| t[0].matmul(&t[1]), vec![bv, x(&[2, 4, 2], 14)]);
    check(
        |t| t[0].addmm(&t[1], &t[2], 0.5, 2.0),
        vec![x(&[2], 15), m, n],
    );
}

#[test]
fn indexing_and_joining_formulas() {
    let a = x(&[4, 3], 16);
    let idx = Tensor::from_vec(vec![2i64, 0, 2], &[3]).unwrap();
    let i2 = idx.clone();
    check(move |t| t[0].index_select(0, &i2), vec![a.clone()]);
    let g = Tensor::from_vec(vec![0i64, 2, 1, 1, 0, 0], &[2, 3]).unwrap();
    let g2 = g.clone();
    check(move |t| t[0].gather(0, &g2), vec![a.clone()]);
    let src = x(&[2, 3], 17);
    check(
        move |t| t[0].scatter_add(0, &g, &t[1]),
        vec![a.clone(), src],
    );
    let mask = Tensor::from_vec(vec![true, false, true], &[3]).unwrap();
    check(move |t| t[0].masked_fill(&mask, 9.0), vec![a.clone()]);
    let b = x(&[2, 3], 18);
    check(
        |t| Tensor::cat(&[&t[0], &t[1], &t[0]], 0),
        vec![a.clone(), b.clone()],
    );
    check(|t| Tensor::stack(&[&t[0], &t[0]], 1), vec![b.clone()]);
    check(
        move |t| {
            let base = t[0].mul(1.0)?;
            base.index_add_(0, &idx, &t[1], 2.0)
        },
        vec![a, x(&[3, 3], 19)],
    );
}

#[test]
fn view_formulas_including_views_of_expanded_tensors() {
    let a = x(&[2, 3, 4], 20);
    check(
        |t| t[0].transpose(0, 2)?.mul(&t[0].transpose(0, 2)?),
        vec![a.clone()],
    );
    check(
        |t| t[0].permute(&[1, 2, 0])?.reshape(&[3, 8]),
        vec![a.clone()],
    );
    check(|t| t[0].narrow(1, 1, 2)?.exp(), vec![a.clone()]);
    check(
        |t| t[0].slice(2, Some(0), Some(4), 2)?.exp(),
        vec![a.clone()],
    );
    check(|t| t[0].select(1, -1)?.exp(), vec![a.clone()]);
    check(|t| t[0].diagonal(0, 1, 2)?.exp(), vec![a.clone()]);
    check(|t| t[0].unfold(2, 2, 1)?.exp(), vec![a.clone()]);
    check(
        |t| t[0].flatten(0, 1)?.unsqueeze(0)?.squeeze(None)?.exp(),
        vec![a.clone()],
    );
    check(
        |t| t[0].split(crate::SplitSize::Size(2), 2)?[1].exp(),
        vec![a.clone()],
    );
    check(
        |t| t[0].as_strided(&[2, 2], &[1, 2], Some(1))?.exp(),
        vec![a.clone()],
    );
    let s = x(&[1, 3], 21);
    check(|t| t[0].expand(&[4, 3])?.exp(), vec![s.clone()]);
    // Views of an expanded tensor go back through the view op itself.
    check(
        |t| t[0].expand(&[4, 3])?.slice(0, Some(1), Some(3), 1)?.exp(),
        vec![s.clone()],
    );
    check(|t| t[0].expand(&[3, 3])?.diagonal(0, 0, 1)?.exp(), vec![s]);
    // reshape that must copy.
    check(|t| t[0].transpose(0, 1)?.reshape(&[-1])?.exp(), vec![a]);
}

#[test]
fn copies_and_conversions_pass_gradients_through() {
    let a = x(&[2, 3], 22);
    check(|t| t[0].deep_clone()?.exp(), vec![a.clone()]);
    check(|t| t[0].t()?.contiguous()?.exp(), vec![a.clone()]);
    let f = Tensor::ones(&[2, 3], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    f.to(DType::F64)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let g = f.grad().unwrap();
    assert_eq!(g.dtype(), DType::F32, "the gradient has the leaf's dtype");
}

#[test]
fn in_place_ops_record_and_rewrite_view_history() {
    // y = a * 2, then y[1:] *= w  -> grad a = 2 on row 0, 2 w on the rest.
    let a = x(&[3, 2], 23);
    let w = x(&[2], 24);
    check(
        |t| {
            let y = t[0].mul(2.0)?;
            y.narrow(0, 1, 2)?.mul_(&t[1])?;
            y.exp()
        },
        vec![a.clone(), w.clone()],
    );
    // A view taken before the in-place write sees the rewritten history too.
    check(
        |t| {
            let y = t[0].mul(1.0)?;
            let v = y.select(0, 0)?;
            y.add_(&t[1])?;
            v.exp()
        },
        vec![a.clone(), w.clone()],
    );
    // A base that did not require grad becomes part of the graph through its view.
    check(
        |t| {
            let base = Tensor::zeros(&[3, 2], DType::F64)?;
            base.select(0, 1)?.copy_(&t[0].sin()?)?;
            base.exp()
        },
        vec![w.clone()],
    );
    for f in [
        |t: &[Tensor]| {
            let y = t[0].mul(1.0)?;
            y.exp_()?;
            y.mul(&y)
        },
        |t: &[Tensor]| {
            let y = t[0].mul(1.0)?;
            y.relu_()?;
            y.mul(&y)
        },
        |t: &[Tensor]| {
            let y = t[0].mul(1.0)?;
            y.clamp_(Some((-0.2).into()), Some(0.3.into()))?;
            y.exp()
        },
        |t: &[Tensor]| {
            let y = t[0].mul(1.0)?;
            y.div_(&t[0].exp()?)?;
            y.exp()
        },
        |t: &[Tensor]| {
            let y = t[0].mul(1.0)?;
            y.sub_(&t[0].sin()?)?;
            y.masked_fill_(&t[0].gt(0.5)?, 0.0)?;
            y.exp()
        },
    ] {
        check(f, vec![a.clone()]);
    }
}

#[test]
fn in_place_errors_match_pytorch_rules() {
    let leaf = x(&[3], 25);
    assert!(matches!(leaf.add_(1.0), Err(Error::Autograd { .. })));
    assert!(leaf.narrow(0, 0, 2).unwrap().mul_(2.0).is_err());
    no_grad(|| leaf.add_(1.0)).unwrap();
    assert_eq!(leaf.version(), 1);
    let y = leaf.mul(2.0).unwrap();
    let parts = y.split(crate::SplitSize::Size(1), 0).unwrap();
    assert!(
        parts[0].add_(1.0).is_err(),
        "multi-output views are read-only under grad"
    );
    let v = no_grad(|| y.narrow(0, 0, 1)).unwrap();
    assert!(v.add_(1.0).is_err(), "a no_grad view modified with grad on");
    no_grad(|| v.add_(1.0)).unwrap();
    let out = Tensor::zeros(&[3], DType::F64).unwrap();
    assert!(
        leaf.add_out(&leaf, 1, &out).is_err(),
        "out= ops are not differentiable"
    );
    no_grad(|| leaf.add_out(&leaf, 1, &out)).unwrap();
}

#[test]
fn saved_tensors_are_version_checked_and_freed_after_backward() {
    let a = x(&[4], 26);
    let e = a.exp().unwrap();
    let loss = e.sum(None, false).unwrap();
    no_grad(|| e.add_(1.0)).unwrap();
    let err = loss.backward().unwrap_err().to_string();
    assert!(
        err.contains("saved at version 0") && err.contains("now it is at version 1"),
        "{err}"
    );
    // `clone()` copies the handle in strata: the hint names the copy that helps.
    assert!(err.contains("deep_clone() it before modifying it"), "{err}");
    assert!(err.contains("ExpBackward0"), "{err}");
    // It names the op that modified the tensor.
    assert!(err.contains("modified in place (last by `add_`)"), "{err}");
    // An optimizer step between forward and backward, the usual way this happens.
    let p = x(&[3], 27);
    let loss = p.mul(&p).unwrap().sum(None, false).unwrap();
    let step = crate::SgdStep {
        lr: 0.1,
        momentum: 0.0,
        dampening: 0.0,
        nesterov: false,
        weight_decay: 0.0,
        maximize: false,
        first_step: true,
    };
    let g = Tensor::ones(&[3], DType::F64).unwrap();
    no_grad(|| p.sgd_(&g, None, &step)).unwrap();
    let err = loss.backward().unwrap_err().to_string();
    assert!(err.contains("(last by `sgd_step_`)"), "{err}");

    let y = a.mul(&a).unwrap().sum(None, false).unwrap();
    y.backward_with(None, true).unwrap();
    y.backward().unwrap();
    let twice = y.backward().unwrap_err().to_string();
    // The same graph run backward twice says so (its root saves nothing and runs again
    // before the freed node is reached: not a tensor carried over from an earlier step).
    assert!(twice.contains("a second time"), "{twice}");
    assert!(
        twice.contains("retain_graph = true to the first"),
        "{twice}"
    );
    assert!(!twice.contains("carried over"), "{twice}");
    // A graph without saved tensors may run twice.
    let z = a.add(1.0).unwrap().sum(None, false).unwrap();
    z.backward().unwrap();
    z.backward().unwrap();
}

#[test]
fn gradients_accumulate_and_the_first_is_taken_over() {
    let a = x(&[3], 27);
    a.mul(2.0)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let first = a.grad().unwrap();
    let ptr = first.data_ptr();
    a.mul(3.0)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(a.grad().unwrap().to_vec::<f64>().unwrap(), vec![5.0; 3]);
    assert_eq!(
        a.grad().unwrap().data_ptr(),
        ptr,
        "later gradients add in place"
    );
    a.zero_grad(false).unwrap();
    assert_eq!(a.grad().unwrap().to_vec::<f64>().unwrap(), vec![0.0; 3]);
    a.zero_grad(true).unwrap();
    assert!(a.grad().is_none());
}

#[test]
fn leaves_flags_hooks_retain_grad_and_grad() {
    let a = x(&[2], 28);
    assert!(a.is_leaf() && a.requires_grad());
    let i = Tensor::arange(3, DType::I64).unwrap();
    assert!(
        i.requires_grad_(true).is_err(),
        "integers cannot require grad"
    );
    let h = a.mul(3.0).unwrap();
    assert!(!h.is_leaf());
    assert_eq!(h.grad_fn_name(), Some("MulBackward0"));
    assert!(h.requires_grad_(false).is_err());
    h.retain_grad().unwrap();
    let handle = a.register_hook(|g| Ok(Some(g.mul(10.0)?))).unwrap();
    h.sum(None, false).unwrap().backward().unwrap();
    assert_eq!(h.grad().unwrap().to_vec::<f64>().unwrap(), vec![1.0, 1.0]);
    assert_eq!(a.grad().unwrap().to_vec::<f64>().unwrap(), vec![30.0, 30.0]);
    handle.remove();
    a.zero_grad(true).unwrap();
    let y = a.mul(&a).unwrap().sum(None, false).unwrap();
    let g = grad(&[&y], &[&a], false).unwrap();
    assert!(a.grad().is_none(), "grad() leaves .grad alone");
    let expect: Vec<f64> = a.to_vec::<f64>().unwrap().iter().map(|v| 2.0 * v).collect();
    assert_eq!(g[0].as_ref().unwrap().to_vec::<f64>().unwrap(), expect);
    let unused = x(&[2], 29);
    let y = a.exp().unwrap().sum(None, false).unwrap();
    assert!(grad(&[&y], &[&unused], false).is_err());
    let y = a.exp().unwrap().sum(None, false).unwrap();
    assert!(grad(&[&y], &[&unused], true).unwrap()[0].is_none());
    let nonscalar = a.mul(2.0).unwrap();
    assert!(nonscalar.backward().is_err());
}

#[test]
fn detach_and_detach_in_place() {
    let a = x(&[3], 30);
    let y = a.exp().unwrap();
    let d = y.detach().unwrap();
    assert!(!d.requires_grad() && d.shares_storage(&y));
    y.detach_().unwrap();
    assert!(!y.requires_grad() && y.is_leaf());
    let v = a.mul(1.0).unwrap().narrow(0, 0, 1).unwrap();
    assert!(v.detach_().is_err(), "views cannot be detached in place");
}

#[test]
fn grad_mode_guards_control_recording() {
    let a = x(&[2], 31);
    let y = no_grad(|| a.mul(2.0)).unwrap();
    assert!(!y.requires_grad());
    let z = no_grad(|| enable_grad(|| a.mul(2.0))).unwrap();
    assert!(z.requires_grad());
    let i = inference_mode(|| a.mul(2.0)).unwrap();
    assert!(!i.requires_grad() && i.is_inference());
}

// The expectations below are PyTorch 2.15's.

#[test]
fn copies_of_inference_tensors_outside_inference_mode_start_at_version_one() {
    let w = inference_mode(|| Tensor::ones(&[3], DType::F32)).unwrap();
    let wt = inference_mode(|| Tensor::ones(&[2, 3], DType::F32).and_then(|t| t.t())).unwrap();
    let c = w.deep_clone().unwrap();
    assert!(!c.is_inference());
    assert_eq!(c.version(), 1);
    assert_eq!(no_grad(|| w.deep_clone()).unwrap().version(), 1);
    assert_eq!(w.to(DType::F64).unwrap().version(), 1);
    assert_eq!(wt.contiguous().unwrap().version(), 1);
    // No copy, no write.
    assert!(w.contiguous().unwrap().is_same(&w));
    assert!(w.to(DType::F32).unwrap().is_same(&w));
    // Inside inference mode a copy is an inference tensor (no version counter).
    let i = inference_mode(|| w.deep_clone()).unwrap();
    assert!(i.is_inference());
    assert_eq!(i.version(), 0);
    // Copies of normal tensors start at 0.
    assert_eq!(
        Tensor::ones(&[3], DType::F32)
            .unwrap()
            .deep_clone()
            .unwrap()
            .version(),
        0
    );
}

#[test]
fn copying_a_tensor_onto_itself_is_checked_like_any_in_place_write() {
    let w = inference_mode(|| Tensor::ones(&[3], DType::F32)).unwrap();
    assert!(
        w.copy_(&w).is_err(),
        "an inference tensor outside inference mode"
    );
    inference_mode(|| w.copy_(&w)).unwrap();
    assert_eq!(w.version(), 0);
    let leaf = x(&[2], 41);
    assert!(leaf.copy_(&leaf).is_err(), "a leaf that requires grad");
    no_grad(|| leaf.copy_(&leaf)).unwrap();
    assert_eq!(leaf.version(), 1);
    let y = leaf.mul(2.0).unwrap();
    y.copy_(&y).unwrap();
    assert_eq!(y.version(), 1);
    assert!(!y.is_leaf());
}

#[test]
fn detach_in_place_does_nothing_inside_inference_mode() {
    let leaf = x(&[2], 43);
    let v = leaf.narrow(0, 0, 1).unwrap();
    inference_mode(|| v.detach_()).unwrap();
    inference_mode(|| leaf.detach_()).unwrap();
    assert!(leaf.requires_grad() && leaf.is_leaf());
    assert!(v.requires_grad() && !v.is_leaf());
    let y = leaf.mul(2.0).unwrap();
    inference_mode(|| y.detach_()).unwrap();
    assert!(y.requires_grad() && !y.is_leaf());
    assert!(
        v.detach_().is_err(),
        "outside inference mode a view still cannot"
    );
    // A view of an inference tensor is not a view to autograd: detach_ passes it by.
    let w = inference_mode(|| Tensor::ones(&[2, 2], DType::F32).and_then(|t| t.t())).unwrap();
    w.detach_().unwrap();
    assert!(w.is_inference() && !w.requires_grad());
}
