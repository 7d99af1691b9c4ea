//! The `Module` trait through the public API: names, sharing, scopes, conversion, hooks.

use std::sync::{Arc, Mutex};

use strata_core::{memory, scope, Category, DType, Device, Grouping, Tensor};

use strata_nn::{Linear, Module, ModuleCore, ReLU, Sequential};

fn mlp() -> Sequential {
    Sequential::new()
        .append(Linear::new(3, 4, true).unwrap())
        .unwrap()
        .append(ReLU::new())
        .unwrap()
        .append(Linear::new(4, 2, false).unwrap())
        .unwrap()
}

#[test]
fn parameters_are_named_in_registration_order_and_marked() {
    let m = mlp();
    let names: Vec<String> = m.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight"]);
    assert_eq!(m.num_parameters(), 12 + 4 + 8);
    assert_eq!(m.parameter_bytes(), 24 * 4);
    for p in m.parameters() {
        assert!(p.requires_grad() && p.is_leaf());
        assert_eq!(p.memory_category(), Category::Parameter);
    }
}

#[test]
fn clones_share_parameters_and_the_training_flag() {
    let m = mlp();
    let c = m.clone();
    assert!(m.parameters()[0].is_same(&c.parameters()[0]));
    c.eval();
    assert!(!m.is_training());
    assert!(
        !m.get(0).unwrap().is_training(),
        "eval reaches the children"
    );
    m.train();
    assert!(c.get(2).unwrap().is_training());
}

#[test]
fn names_are_checked() {
    let core = ModuleCore::new("Custom");
    let t = Tensor::zeros(&[2], DType::F32).unwrap();
    core.register_parameter("w", t.clone()).unwrap();
    assert!(core.register_buffer("w", t.clone(), true).is_err());
    assert!(core.register_parameter("a.b", t.clone()).is_err());
    assert!(core.register_parameter("", t).is_err());
    let recorded = Tensor::ones(&[2], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap()
        .mul(2.0)
        .unwrap();
    let err = core.register_parameter("v", recorded).unwrap_err();
    assert!(err.to_string().contains("leaf"), "{err}");
}

#[test]
fn zero_grad_drops_the_gradients() {
    let m = mlp();
    let x = Tensor::ones(&[5, 3], DType::F32).unwrap();
    m.call(&x)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert!(m.parameters().iter().all(|p| p.grad().is_some()));
    m.zero_grad().unwrap();
    assert!(m.parameters().iter().all(|p| p.grad().is_none()));
}

#[test]
fn call_enters_the_dotted_scope_of_each_child() {
    // A child that records the scope its forward runs in.
    #[derive(Clone)]
    struct Probe {
        core: ModuleCore,
        seen: Arc<Mutex<Vec<String>>>,
    }
    impl Module for Probe {
        fn core(&self) -> &ModuleCore {
            &self.core
        }
        fn forward(&self, x: &Tensor) -> strata_core::Result<Tensor> {
            self.seen.lock().unwrap().push(scope::current().to_owned());
            Ok(x.clone())
        }
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let probe = Probe {
        core: ModuleCore::new("Probe"),
        seen: seen.clone(),
    };
    let inner = Sequential::new()
        .append(ReLU::new())
        .unwrap()
        .append(probe.clone())
        .unwrap();
    let outer = ModuleCore::new("Net");
    outer.register_module("features", &inner).unwrap();
    let x = Tensor::ones(&[2], DType::F32).unwrap();
    inner.call(&x).unwrap();
    let _model = scope::enter("model");
    inner.call(&x).unwrap();
    assert_eq!(*seen.lock().unwrap(), ["features.1", "model.features.1"]);
}

#[test]
fn memory_is_reported_under_the_child_path() {
    let net = Sequential::new()
        .append(Linear::new(256, 256, true).unwrap())
        .unwrap();
    let outer = ModuleCore::new("Net");
    outer.register_module("encoder", &net).unwrap();
    let x = Tensor::ones(&[64, 256], DType::F32).unwrap();
    let y = net.call(&x).unwrap();
    let groups = memory::live_allocations_by(Device::Cpu, Grouping::Scope).unwrap();
    assert!(
        groups
            .iter()
            .any(|g| g.key == "encoder.0" && g.bytes >= 64 * 256 * 4),
        "{groups:?}"
    );
    drop(y);
}

#[test]
fn apply_visits_children_first_and_downcasts() {
    let m = mlp();
    let mut kinds = Vec::new();
    m.apply(&mut |module| {
        kinds.push(module.core().kind());
        if let Some(l) = module.downcast_ref::<Linear>() {
            strata_nn::init::zeros_(&l.weight())?;
        }
        Ok(())
    })
    .unwrap();
    assert_eq!(kinds, ["Linear", "ReLU", "Linear", "Sequential"]);
    let w = m.parameters()[0].to_vec::<f32>().unwrap();
    assert!(w.iter().all(|&v| v == 0.0));
}

#[test]
fn to_dtype_keeps_each_parameter_the_same_tensor() {
    let m = mlp();
    let held = m.parameters();
    let x = Tensor::ones(&[5, 3], DType::F32).unwrap();
    m.call(&x)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    // SAFETY: nothing else uses the module's tensors meanwhile.
    unsafe { m.to_dtype(DType::F64).unwrap() };
    for (old, new) in held.iter().zip(m.parameters()) {
        assert!(old.is_same(&new));
        assert_eq!(old.dtype(), DType::F64);
        assert_eq!(old.grad().unwrap().dtype(), DType::F64);
        assert!(old.requires_grad() && old.is_leaf());
        assert_eq!(old.memory_category(), Category::Parameter);
    }
    let y = m.call(&x.to(DType::F64).unwrap()).unwrap();
    assert_eq!(y.dtype(), DType::F64);
    // SAFETY: as above.
    assert!(unsafe { m.to_dtype(DType::I32) }.is_err());
    // SAFETY: as above.
    unsafe { m.to_device(Device::Cpu).unwrap() };
    assert!(held[0].is_same(&m.parameters()[0]));
}

#[test]
fn to_meta_gives_new_tensors_on_meta() {
    let m = mlp();
    // SAFETY: nothing else uses the module's tensors meanwhile.
    unsafe { m.to_device(Device::Meta).unwrap() };
    for p in m.parameters() {
        assert_eq!(p.device(), Device::Meta);
        assert!(p.requires_grad());
    }
}

#[test]
fn pre_forward_hooks_run_and_can_be_removed() {
    let m = Linear::new(2, 2, true).unwrap();
    let count = Arc::new(Mutex::new(0));
    let c = count.clone();
    let id = m.core().add_pre_forward_hook(Arc::new(move |_| {
        *c.lock().unwrap() += 1;
        Ok(())
    }));
    let x = Tensor::ones(&[1, 2], DType::F32).unwrap();
    m.call(&x).unwrap();
    assert!(m.core().remove_pre_forward_hook(id));
    m.call(&x).unwrap();
    assert_eq!(*count.lock().unwrap(), 1);
}
