use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostAllocator};
use strata_core::autograd::{checkpoint, no_grad};
use strata_core::{with_allocator, DType, Tensor};

use super::*;
use crate::{Linear, Module, ReLU};

fn stack(layers: usize, width: usize) -> Sequential {
    let mut s = Sequential::new();
    for _ in 0..layers {
        s = s
            .append(Linear::new(width, width, true).unwrap())
            .unwrap()
            .append(ReLU::new())
            .unwrap();
    }
    s
}

/// The peak of allocated bytes above what was live before, for one forward under `no_grad`.
fn forward_peak(layers: usize) -> usize {
    let a: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
    with_allocator(&a, || {
        let net = stack(layers, 64);
        let x = Tensor::ones(&[32, 64], DType::F32).unwrap();
        let before = a.memory_allocated();
        a.reset_peak_memory_stats();
        let y = no_grad(|| net.call(&x)).unwrap();
        let peak = a.max_memory_allocated() - before;
        assert_eq!(y.shape().as_slice(), [32, 64]);
        peak
    })
}

#[test]
fn deep_no_grad_stacks_peak_as_high_as_shallow_ones() {
    let shallow = forward_peak(3);
    let deep = forward_peak(20);
    assert_eq!(deep, shallow);
    // Input, one layer's output and the next one's: no more than a few activations.
    assert!(shallow <= 4 * 32 * 64 * 4, "{shallow}");
}

#[test]
fn sequential_keys_count_parameter_free_children() {
    let s = stack(2, 3);
    let names: Vec<String> = s.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["0.weight", "0.bias", "2.weight", "2.bias"]);
    assert_eq!(s.len(), 4);
    assert!(s.get(1).unwrap().downcast_ref::<ReLU>().is_some());
    assert!(Sequential::new()
        .call(&Tensor::ones(&[1], DType::F32).unwrap())
        .is_ok());
}

#[test]
fn list_and_dict_register_in_order_and_have_no_forward() {
    let list = ModuleList::new()
        .append(Linear::new(2, 2, false).unwrap())
        .unwrap()
        .append(Linear::new(2, 3, false).unwrap())
        .unwrap();
    let names: Vec<String> = list
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["0.weight", "1.weight"]);
    let x = Tensor::ones(&[1, 2], DType::F32).unwrap();
    assert!(list.call(&x).is_err());

    let dict = ModuleDict::new();
    dict.insert("zeta", Linear::new(2, 2, true).unwrap())
        .unwrap();
    dict.insert("alpha", Linear::new(2, 2, false).unwrap())
        .unwrap();
    assert!(dict.insert("zeta", ReLU::new()).is_err());
    assert_eq!(dict.keys(), ["zeta", "alpha"]);
    let names: Vec<String> = dict
        .named_parameters()
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(names, ["zeta.weight", "zeta.bias", "alpha.weight"]);
    assert!(dict.get("alpha").is_some() && dict.call(&x).is_err());
}

#[test]
fn checkpointed_blocks_match_plain_gradients() {
    let net = stack(4, 8);
    let x = Tensor::randn(&[3, 8], DType::F32).unwrap();
    net.call(&x)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    let plain: Vec<Vec<f32>> = net
        .parameters()
        .iter()
        .map(|p| p.grad().unwrap().to_vec().unwrap())
        .collect();
    net.zero_grad().unwrap();
    let y = checkpoint_sequential(&net, 3, &x).unwrap();
    y.sum(None, false).unwrap().backward().unwrap();
    for (p, want) in net.parameters().iter().zip(&plain) {
        let got: Vec<f32> = p.grad().unwrap().to_vec().unwrap();
        for (g, w) in got.iter().zip(want) {
            assert!((g - w).abs() < 1e-5, "{g} vs {w}");
        }
    }
    assert!(checkpoint_sequential(&net, 0, &x).is_err());
}

#[test]
fn a_block_moves_into_a_checkpointed_closure() {
    let block = stack(1, 4);
    let moved = block.clone();
    let x = Tensor::ones(&[2, 4], DType::F32)
        .unwrap()
        .requires_grad_(true)
        .unwrap();
    let out = checkpoint(move |x| moved.forward(&x[0]).map(|y| vec![y]), &[x]).unwrap();
    out[0].sum(None, false).unwrap().backward().unwrap();
    assert!(block.parameters().iter().all(|p| p.grad().is_some()));
}

#[test]
fn a_container_cannot_contain_itself() {
    let outer = Sequential::new().append(ReLU::new()).unwrap();
    assert!(outer.push(Arc::new(outer.clone())).is_err());
    let inner = Sequential::new();
    let outer = outer.append(inner.clone()).unwrap();
    let err = inner.push(Arc::new(outer.clone())).unwrap_err();
    assert!(err.to_string().contains("cannot contain itself"), "{err}");
    assert_eq!(inner.len(), 0);
    let list = ModuleList::new();
    assert!(list.push(Arc::new(list.clone())).is_err());
}
