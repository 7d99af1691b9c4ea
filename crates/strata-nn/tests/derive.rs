//! `#[derive(Module)]`: every field that is a module, a list or option of modules, a
//! parameter or a buffer is registered under its name; nothing can be forgotten.

use strata_core::{DType, Result, Tensor};
use strata_nn::state::StateDictExt;
use strata_nn::{Forward, Linear, Module, ModuleCore, ReLU, TensorSlot};

#[derive(Module, Clone)]
#[module(crate = strata_nn)]
struct Net {
    core: ModuleCore,
    fc1: Linear,
    act: ReLU,
    blocks: Vec<Linear>,
    head: Option<Linear>,
    missing: Option<Linear>,
    #[module(rename = "proj")]
    out: Linear,
    scale: TensorSlot,
    #[module(buffer)]
    steps: TensorSlot,
    #[module(buffer, persistent = false)]
    scratch: TensorSlot,
    #[module(skip)]
    width: usize,
}

impl Net {
    fn new(width: usize) -> Result<Net> {
        Ok(Net {
            core: ModuleCore::new("Net"),
            fc1: Linear::new(4, width, true)?,
            act: ReLU::new(),
            blocks: vec![
                Linear::new(width, width, false)?,
                Linear::new(width, width, false)?,
            ],
            head: Some(Linear::new(width, width, true)?),
            missing: None,
            out: Linear::new(width, 2, true)?,
            scale: TensorSlot::new(Tensor::ones(&[2], DType::F32)?),
            steps: TensorSlot::new(Tensor::zeros(&[1], DType::I64)?),
            scratch: TensorSlot::new(Tensor::zeros(&[3], DType::F32)?),
            width,
        })
    }
}

impl Forward for Net {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        assert_eq!(x.shape()[1], 4);
        let mut h = self.act.call(&self.fc1.call(x)?)?;
        for b in &self.blocks {
            h = b.call(&h)?;
        }
        if let Some(head) = &self.head {
            h = head.call(&h)?;
        }
        assert_eq!(h.shape()[1], self.width);
        self.out.call(&h)?.mul(&self.scale.get())
    }
}

#[test]
fn every_field_is_registered_under_its_name() -> Result<()> {
    let net = Net::new(8)?;
    let names: Vec<String> = net.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(
        names,
        [
            "scale",
            "fc1.weight",
            "fc1.bias",
            "blocks.0.weight",
            "blocks.1.weight",
            "head.weight",
            "head.bias",
            "proj.weight",
            "proj.bias",
        ]
    );
    let buffers: Vec<String> = net.named_buffers().into_iter().map(|(n, _)| n).collect();
    assert_eq!(buffers, ["steps", "scratch"]);
    // The state dict holds parameters and persistent buffers, with PyTorch's keys.
    let mut keys = net.state_dict().keys();
    keys.sort();
    assert!(keys.contains(&"steps".to_owned()) && !keys.contains(&"scratch".to_owned()));
    assert!(keys.contains(&"blocks.1.weight".to_owned()));
    assert!(
        net.scale.get().requires_grad(),
        "a slot field is a parameter"
    );
    Ok(())
}

#[test]
fn a_derived_module_trains_every_field() -> Result<()> {
    let net = Net::new(8)?;
    let y = net.call(&Tensor::randn(&[5, 4], DType::F32)?)?;
    assert_eq!(y.shape().as_slice(), [5, 2]);
    y.sum(None, false)?.backward()?;
    for (name, p) in net.named_parameters() {
        assert!(p.grad().is_some(), "{name} got no gradient");
    }
    // Clones share the registry: registering happens once.
    let twin = net.clone();
    assert_eq!(twin.named_parameters().len(), 9);
    assert_eq!(net.num_parameters(), twin.num_parameters());
    Ok(())
}

#[derive(Module, Clone)]
#[module(crate = strata_nn)]
struct Outer {
    core: ModuleCore,
    inner: Net,
}

impl Forward for Outer {
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        self.inner.call(x)
    }
}

#[test]
fn derived_modules_nest_with_dotted_keys() -> Result<()> {
    let outer = Outer {
        core: ModuleCore::new("Outer"),
        inner: Net::new(3)?,
    };
    let names: Vec<String> = outer
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names.first().map(String::as_str), Some("inner.scale"));
    assert!(names.contains(&"inner.blocks.1.weight".to_owned()));
    assert_eq!(
        outer
            .call(&Tensor::ones(&[1, 4], DType::F32)?)?
            .shape()
            .as_slice(),
        [1, 2]
    );
    Ok(())
}

#[test]
fn a_name_registered_twice_is_an_error_at_the_forward() -> Result<()> {
    let net = Net::new(2)?;
    // Registering a field's name by hand before first use takes the name from the derive.
    net.core
        .register_module("fc1", &Linear::new(1, 1, false)?)?;
    let err = net.call(&Tensor::ones(&[1, 4], DType::F32)?).unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("fields of Net could not be registered"),
        "{text}"
    );
    assert!(text.contains("\"fc1\""), "{text}");
    Ok(())
}
