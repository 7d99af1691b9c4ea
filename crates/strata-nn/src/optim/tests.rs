//! Unit tests of the optimizer's bookkeeping: checks, state dict layout, groups.

use serde_json::Value;
use strata_core::{DType, Device, Result, Tensor};

use super::*;

fn leaf(values: &[f32]) -> Result<Tensor> {
    Tensor::from_vec(values.to_vec(), &[values.len()])?.requires_grad_(true)
}

#[test]
fn constructors_check_hyper_parameters_as_pytorch() -> Result<()> {
    let p = leaf(&[1.0])?;
    let bad_sgd = [
        Sgd {
            lr: -1.0,
            ..Sgd::default()
        },
        Sgd {
            momentum: -0.1,
            ..Sgd::default()
        },
        Sgd {
            nesterov: true,
            ..Sgd::default()
        },
        Sgd {
            nesterov: true,
            momentum: 0.9,
            dampening: 0.1,
            ..Sgd::default()
        },
    ];
    for s in bad_sgd {
        assert!(Optimizer::sgd([p.clone()], s).is_err(), "{s:?}");
    }
    let bad_adam = [
        Adam {
            betas: (1.0, 0.999),
            ..Adam::default()
        },
        Adam {
            eps: -1e-8,
            ..Adam::default()
        },
        Adam {
            weight_decay: -0.1,
            ..Adam::default()
        },
    ];
    for a in bad_adam {
        assert!(Optimizer::adam([p.clone()], a).is_err(), "{a:?}");
    }
    // Non-leaves and integer tensors cannot be optimized.
    let non_leaf = p.mul(2.0)?;
    assert!(Optimizer::sgd([non_leaf], Sgd::default()).is_err());
    let ints = Tensor::zeros(&[2], DType::I64)?;
    assert!(Optimizer::sgd([ints], Sgd::default()).is_err());
    Ok(())
}

#[test]
fn a_parameter_without_gradient_gets_no_state_and_does_not_move() -> Result<()> {
    let (a, b) = (leaf(&[1.0, 2.0])?, leaf(&[3.0])?);
    let mut opt = Optimizer::adam([a.clone(), b.clone()], Adam::default())?;
    a.set_grad(Some(Tensor::ones(&[2], DType::F32)?))?;
    opt.step()?;
    opt.step()?;
    assert_eq!(opt.step_count(0), Some(2));
    assert_eq!(opt.step_count(1), None);
    assert_eq!(b.to_vec::<f32>()?, vec![3.0]);
    assert_eq!(opt.state_bytes(), 2 * 2 * 4);
    // A gradient of the wrong shape is refused before any parameter moves.
    b.set_grad(Some(Tensor::ones(&[2], DType::F32)?)).ok();
    if b.grad().is_some_and(|g| g.numel() == 2) {
        let before = a.to_vec::<f32>()?;
        assert!(opt.step().is_err());
        assert_eq!(a.to_vec::<f32>()?, before);
    }
    Ok(())
}

#[test]
fn the_state_dict_has_pytorch_keys_and_groups() -> Result<()> {
    let (a, b) = (leaf(&[1.0, 2.0])?, leaf(&[3.0])?);
    let mut opt = Optimizer::with_groups(
        vec![
            ParamGroup::new([a.clone()]),
            ParamGroup::new([b.clone()]).lr(0.5).weight_decay(0.1),
        ],
        Rule::Sgd(Sgd {
            lr: 0.1,
            momentum: 0.9,
            ..Sgd::default()
        }),
    )?;
    a.set_grad(Some(Tensor::ones(&[2], DType::F32)?))?;
    opt.step()?;
    let d = opt.state_dict();
    assert_eq!(d.keys(), vec!["state.0.momentum_buffer".to_string()]);
    assert_eq!(d.metadata("optimizer"), Some("SGD"));
    let groups: Value = serde_json::from_str(d.metadata("param_groups").unwrap_or(""))
        .map_err(|e| strata_core::Error::argument("test", e.to_string(), None))?;
    assert_eq!(groups[0]["params"], serde_json::json!([0]));
    assert_eq!(groups[1]["params"], serde_json::json!([1]));
    assert_eq!(groups[1]["lr"], serde_json::json!(0.5));
    assert_eq!(groups[1]["weight_decay"], serde_json::json!(0.1));
    assert_eq!(groups[0]["momentum"], serde_json::json!(0.9));
    // A dict for one group is refused by an optimizer with two, and nothing changes.
    let mut single = Optimizer::sgd(
        [a.clone()],
        Sgd {
            momentum: 0.9,
            ..Sgd::default()
        },
    )?;
    let one = single.state_dict();
    assert!(opt.load_state_dict(&one).is_err());
    assert_eq!(opt.lr(1)?, 0.5);
    single.load_state_dict(&one)?;
    Ok(())
}

#[test]
fn meta_parameters_step_on_meta_with_state_on_meta() -> Result<()> {
    let p = Tensor::on(Device::Meta)
        .zeros(&[4, 4], DType::F32)?
        .requires_grad_(true)?;
    p.set_grad(Some(Tensor::on(Device::Meta).zeros(&[4, 4], DType::F32)?))?;
    let mut opt = Optimizer::adam([p.clone()], Adam::adamw())?;
    opt.step()?;
    assert_eq!(opt.state_bytes(), 2 * 64);
    // AdamW's decay and update are two writes, as in PyTorch.
    assert_eq!(p.version(), 2);
    Ok(())
}
