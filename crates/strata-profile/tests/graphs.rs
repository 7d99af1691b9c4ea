//! The graph watches on the guides' pitfalls, each beside its fix: losses kept with their
//! graphs, an RNN state carried without `detach`, evaluation without `no_grad`, gradients
//! never cleared.

mod common;

/// This file, to find the lines findings must name.
const SOURCE: &str = include_str!("graphs.rs");

use strata_core::autograd::live_graph;
use strata_core::autograd::no_grad;
use strata_core::{memory_allocated, DType, Device, Tensor};
use strata_nn::optim::{Optimizer, Sgd};
use strata_nn::{Module, Sequential};
use strata_profile::{FindingKind, GradWatch, GraphWatch};

type Res = Result<(), Box<dyn std::error::Error>>;

fn model() -> strata_core::Result<Sequential> {
    common::mlp(16, 32, 1)
}

fn nodes() -> usize {
    live_graph().iter().map(|g| g.nodes).sum()
}

#[test]
fn losses_kept_with_their_graphs() -> Res {
    let _serial = common::serial();
    let m = model()?;
    let x = Tensor::randn(&[64, 16], DType::F32)?;
    let mut watch = GraphWatch::new();
    let mut losses = Vec::new();
    let mut found = Vec::new();
    let start_nodes = nodes();
    let start_bytes = memory_allocated(Device::Cpu)?;
    for _ in 0..6 {
        let loss = m.call(&x)?.mean(None, false)?;
        loss.backward()?;
        m.zero_grad()?;
        losses.push(loss); // the pitfall: each loss holds its step's graph
        found.extend(watch.step());
    }
    // As the pitfall really behaves: the allocator grows only by each loss (one 512-byte
    // block a step), but the graph's nodes grow every step.
    assert_eq!(memory_allocated(Device::Cpu)? - start_bytes, 6 * 512);
    assert!(nodes() - start_nodes >= 6 * 4);
    println!("{}", found[0]);
    assert_eq!(found[0].kind, FindingKind::GraphKept);
    assert!(found[0].message.contains("loss.item()"));
    // Named by creating site and scope: the model's last layer (scope "2") among them.
    assert!(
        found[0].message.contains("(2, AddmmBackward0)"),
        "{}",
        found[0]
    );
    drop(losses);
    assert_eq!(nodes(), start_nodes);

    // The fix: keep the number.
    let mut watch = GraphWatch::new();
    let mut kept = Vec::new();
    for _ in 0..6 {
        let loss = m.call(&x)?.mean(None, false)?;
        loss.backward()?;
        m.zero_grad()?;
        kept.push(loss.item::<f32>()?);
        assert!(watch.step().is_empty());
    }
    assert_eq!(nodes(), start_nodes);
    Ok(())
}

/// One step of a tiny RNN: the new hidden state from the input and the old one.
fn cell(x: &Tensor, h: &Tensor, wx: &Tensor, wh: &Tensor) -> strata_core::Result<Tensor> {
    x.matmul(wx)?.add(&h.matmul(wh)?)?.tanh() // the hidden state is made here
}

#[test]
fn an_rnn_state_carried_without_detach() -> Res {
    let _serial = common::serial();
    let wx = Tensor::randn(&[8, 16], DType::F32)?.requires_grad_(true)?;
    let wh = Tensor::randn(&[16, 16], DType::F32)?
        .mul(0.1)?
        .requires_grad_(true)?;
    let batch = || Tensor::randn(&[4, 8], DType::F32);

    // The pitfall: the second backward reaches the first batch's freed graph. strata's
    // error names the cause; PyTorch's suggests retain_graph, the usual wrong fix.
    let mut h = Tensor::zeros(&[4, 16], DType::F32)?;
    h = cell(&batch()?, &h, &wx, &wh)?;
    h.sum(None, false)?.backward()?;
    h = cell(&batch()?, &h, &wx, &wh)?;
    let err = h
        .sum(None, false)?
        .backward()
        .expect_err("backward into a freed graph");
    println!("{err}");
    assert!(
        err.to_string().contains("detach the carried state"),
        "{err}"
    );

    // Backward twice through one graph keeps the retain_graph hint.
    let y = wx.mul(&wx)?.sum(None, false)?;
    y.backward()?;
    let err = y.backward().expect_err("twice");
    assert!(err.to_string().contains("retain_graph = true"), "{err}");

    // With retain_graph every step's graph stays: nodes and saved bytes grow each step,
    // and the watch points at the line that makes the carried state.
    let mut watch = GraphWatch::new();
    let mut h = Tensor::zeros(&[4, 16], DType::F32)?;
    let mut found = Vec::new();
    for _ in 0..6 {
        h = cell(&batch()?, &h, &wx, &wh)?;
        h.sum(None, false)?.backward_with(None, true)?;
        found.extend(watch.step());
    }
    println!("{}", found[0]);
    assert_eq!(found[0].kind, FindingKind::CarriedState);
    let cell_line = format!(
        "graphs.rs:{} (TanhBackward0)",
        common::line_of(SOURCE, "the hidden state is made here")
    );
    assert!(found[0].message.contains(&cell_line), "{}", found[0]);
    drop(h);

    // The fix: detach the carried state at the start of each step.
    let mut watch = GraphWatch::new();
    let start_nodes = nodes();
    let mut h = Tensor::zeros(&[4, 16], DType::F32)?;
    for _ in 0..6 {
        h = cell(&batch()?, &h.detach()?, &wx, &wh)?;
        h.sum(None, false)?.backward()?;
        assert!(watch.step().is_empty());
    }
    drop(h);
    assert_eq!(nodes(), start_nodes);
    Ok(())
}

#[test]
fn evaluation_without_no_grad_builds_a_graph() -> Res {
    let _serial = common::serial();
    let m = model()?;
    let x = Tensor::randn(&[256, 16], DType::F32)?;
    m.eval();
    let out = m.call(&x)?; // the pitfall: every module in eval mode, grad mode still on
    let found = GraphWatch::check_eval(&m).expect("a graph built in evaluation");
    println!("{found}");
    assert_eq!(found.kind, FindingKind::GraphInEval);
    assert!(found.message.contains("no_grad"));
    drop(out);
    // The fix: evaluate under no_grad; no graph, nothing saved.
    let out = no_grad(|| m.call(&x))?;
    assert!(GraphWatch::check_eval(&m).is_none());
    drop(out);
    // In training mode a graph is expected.
    m.train();
    let out = m.call(&x)?;
    assert!(GraphWatch::check_eval(&m).is_none());
    drop(out);
    Ok(())
}

#[test]
fn gradients_never_cleared() -> Res {
    let _serial = common::serial();
    let m = model()?;
    let x = Tensor::randn(&[8, 16], DType::F32)?;
    let sgd = Sgd {
        lr: 0.01,
        ..Sgd::default()
    };
    // The pitfall: no zero_grad, so each step uses every gradient since the start. Memory
    // does not grow (gradients accumulate in place); the watch warns instead.
    let mut opt = Optimizer::sgd(m.parameters(), sgd)?;
    let watch = GradWatch::attach(&mut opt);
    let before = memory_allocated(Device::Cpu)?;
    for _ in 0..3 {
        m.call(&x)?.mean(None, false)?.backward()?;
        opt.step()?;
    }
    assert_eq!(memory_allocated(Device::Cpu)?, before + grad_bytes(&m));
    let found = watch.findings();
    println!("{}", found[0]);
    assert_eq!(found.len(), 2, "steps 2 and 3 used summed gradients");
    assert_eq!(found[0].kind, FindingKind::GradNotCleared);
    assert!(found[0].message.contains("summed over 2 backward passes"));

    // The fix: zero_grad after each step.
    opt.zero_grad(true)?;
    let mut opt = Optimizer::sgd(m.parameters(), sgd)?;
    let watch = GradWatch::attach(&mut opt);
    for _ in 0..3 {
        m.call(&x)?.mean(None, false)?.backward()?;
        opt.step()?;
        opt.zero_grad(true)?;
    }
    assert!(watch.findings().is_empty());

    // Declared accumulation over 4 passes is not a mistake.
    let mut opt = Optimizer::sgd(m.parameters(), sgd)?;
    let watch = GradWatch::attach(&mut opt);
    watch.declare_accumulation(4);
    for step in 1..=8 {
        m.call(&x)?.mean(None, false)?.backward()?;
        if step % 4 == 0 {
            opt.step()?;
            opt.zero_grad(false)?;
        }
    }
    assert!(watch.findings().is_empty());
    Ok(())
}

/// Bytes the model's gradients hold (each rounded to the allocator's 512 bytes).
fn grad_bytes(m: &Sequential) -> usize {
    m.parameters()
        .iter()
        .map(|p| p.nbytes().div_ceil(512) * 512)
        .sum()
}
