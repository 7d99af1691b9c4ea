use std::sync::Arc;

use strata_alloc::{DeviceAllocator, HostAllocator};
use strata_core::autograd::no_grad;
use strata_core::{with_allocator, DType, Generator, Tensor};

use super::*;
use crate::{Linear, Module, Sequential};

fn layer_with(values: Vec<f32>, rows: usize, cols: usize) -> Linear {
    let l = Linear::new(cols, rows, true).unwrap();
    no_grad(|| {
        l.weight()
            .copy_(&Tensor::from_vec(values, &[rows, cols]).unwrap())
    })
    .unwrap();
    l
}

fn zeros_of(t: &Tensor) -> usize {
    t.to_vec::<f32>()
        .unwrap()
        .iter()
        .filter(|&&v| v == 0.0)
        .count()
}

#[test]
fn l1_in_place_masks_the_smallest_and_keeps_the_parameter() {
    let l = layer_with(vec![0.1, -5.0, 0.3, 2.0, -0.2, 4.0], 2, 3);
    let held = l.weight();
    l1_unstructured(&l, "weight", Amount::Count(3), Form::InPlace).unwrap();
    assert!(is_pruned(&l, "weight"));
    assert!(l.weight().is_same(&held));
    assert_eq!(
        held.to_vec::<f32>().unwrap(),
        [0.0, -5.0, 0.0, 2.0, 0.0, 4.0]
    );
    let (_, mask) = &l.named_buffers()[0];
    assert_eq!(mask.dtype(), DType::Bool);
    // The mask is not part of the state dict: the masked weight loads into a plain layer.
    assert_eq!(l.state_dict().keys(), ["weight", "bias"]);
    // Pruning again takes its amount from what remains.
    l1_unstructured(&l, "weight", Amount::Fraction(0.34), Form::InPlace).unwrap();
    assert_eq!(
        held.to_vec::<f32>().unwrap(),
        [0.0, -5.0, 0.0, 0.0, 0.0, 4.0]
    );
    assert!(l1_unstructured(&l, "weight", Amount::Count(1), Form::Reparametrized).is_err());
    assert!(l1_unstructured(&l, "nope", Amount::Count(1), Form::InPlace).is_err());
    remove(&l, "weight").unwrap();
    assert!(!is_pruned(&l, "weight") && l.named_buffers().is_empty());
    assert!(remove(&l, "weight").is_err());
}

#[test]
fn reapply_after_an_sgd_step_zeroes_again_without_allocating() {
    let a: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
    with_allocator(&a, || {
        let l = Linear::new(16, 16, true).unwrap();
        l1_unstructured(&l, "weight", Amount::Fraction(0.5), Form::InPlace).unwrap();
        let x = Tensor::randn(&[4, 16], DType::F32).unwrap();
        l.call(&x)
            .unwrap()
            .sum(None, false)
            .unwrap()
            .backward()
            .unwrap();
        no_grad(|| {
            for p in l.parameters() {
                p.sub_(&p.grad().unwrap().mul(0.1).unwrap()).unwrap();
            }
        });
        assert!(zeros_of(&l.weight()) < 128, "the step moved pruned weights");
        l.zero_grad().unwrap();
        let before = a.memory_allocated();
        a.reset_peak_memory_stats();
        reapply(&l).unwrap();
        assert_eq!(zeros_of(&l.weight()), 128);
        assert_eq!(a.max_memory_allocated(), before, "reapply allocated");
    });
}

#[test]
fn pytorch_form_reparametrises_and_remove_restores() {
    let l = layer_with(vec![1.0, -2.0, 0.5, 3.0], 2, 2);
    let orig = l.weight();
    l1_unstructured(&l, "weight", Amount::Count(1), Form::Reparametrized).unwrap();
    let names: Vec<String> = l.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["bias", "weight_orig"]);
    assert_eq!(
        l.state_dict().keys(),
        ["bias", "weight_orig", "weight_mask"]
    );
    assert!(l.named_parameters()[1].1.is_same(&orig));
    assert_eq!(l.weight().to_vec::<f32>().unwrap(), [1.0, -2.0, 0.0, 3.0]);
    // The forward recomputes weight from orig and mask; gradients reach orig, masked.
    let x = Tensor::ones(&[1, 2], DType::F32).unwrap();
    l.call(&x)
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    assert_eq!(
        orig.grad().unwrap().to_vec::<f32>().unwrap(),
        [1.0, 1.0, 0.0, 1.0]
    );
    remove(&l, "weight").unwrap();
    let names: Vec<String> = l.named_parameters().into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["bias", "weight"]);
    assert!(l.weight().is_same(&orig));
    assert_eq!(orig.to_vec::<f32>().unwrap(), [1.0, -2.0, 0.0, 3.0]);
    assert!(l.named_buffers().is_empty());
}

#[test]
fn structured_random_and_global() {
    // Rows with L2 norms 5, 1, 13.
    let l = layer_with(vec![3.0, 4.0, 0.0, 1.0, 5.0, 12.0], 3, 2);
    ln_structured(&l, "weight", Amount::Count(1), 2.0, 0, Form::InPlace).unwrap();
    assert_eq!(
        l.weight().to_vec::<f32>().unwrap(),
        [3.0, 4.0, 0.0, 0.0, 5.0, 12.0]
    );
    ln_structured(&l, "weight", Amount::Count(1), 2.0, 0, Form::InPlace).unwrap();
    assert_eq!(
        l.weight().to_vec::<f32>().unwrap(),
        [0.0, 0.0, 0.0, 0.0, 5.0, 12.0]
    );
    assert!(ln_structured(&l, "weight", Amount::Count(1), 2.0, 5, Form::InPlace).is_err());

    let r = Linear::new(10, 10, false).unwrap();
    random_unstructured(
        &r,
        "weight",
        Amount::Fraction(0.3),
        Form::InPlace,
        Some(&mut Generator::new(1)),
    )
    .unwrap();
    assert_eq!(zeros_of(&r.weight()), 30);

    let a = layer_with(vec![0.1, 0.2, 5.0, 6.0], 2, 2);
    let b = layer_with(vec![0.3, 7.0, 8.0, 9.0], 2, 2);
    global_unstructured(
        &[(&a, "weight"), (&b, "weight")],
        Amount::Count(3),
        Form::InPlace,
    )
    .unwrap();
    assert_eq!(zeros_of(&a.weight()), 2);
    assert_eq!(zeros_of(&b.weight()), 1);
}

#[test]
fn pytorch_keys_from_the_in_place_form() {
    let net = Sequential::new()
        .append(layer_with(vec![1.0, 0.1, 2.0, 0.2], 2, 2))
        .unwrap();
    l1_unstructured(
        net.get(0).unwrap().as_ref(),
        "weight",
        Amount::Count(2),
        Form::InPlace,
    )
    .unwrap();
    let d = pytorch_state_dict(&net).unwrap();
    let mut keys = d.keys();
    keys.sort();
    assert_eq!(keys, ["0.bias", "0.weight_mask", "0.weight_orig"]);
    assert_eq!(
        d.get("0.weight_mask").unwrap().to_vec::<f32>().unwrap(),
        [1.0, 0.0, 1.0, 0.0]
    );
    assert_eq!(
        d.get("0.weight_orig").unwrap().to_vec::<f32>().unwrap(),
        [1.0, 0.0, 2.0, 0.0]
    );
}

/// Bytes a 256×256 f32 layer holds after pruning in `form`, as the allocator counts them.
fn held_after_pruning(form: Form) -> (usize, usize) {
    let a: Arc<dyn DeviceAllocator> = Arc::new(HostAllocator::new());
    with_allocator(&a, || {
        let l = Linear::new(256, 256, false).unwrap();
        let weight = a.memory_allocated();
        l1_unstructured(&l, "weight", Amount::Fraction(0.5), form).unwrap();
        let held = a.memory_allocated();
        drop(l);
        (weight, held)
    })
}

#[test]
fn memory_of_the_two_forms() {
    let (weight, in_place) = held_after_pruning(Form::InPlace);
    assert_eq!(weight, 256 * 256 * 4);
    // The weight and a one-byte-per-element mask.
    assert_eq!(in_place, weight + 256 * 256);
    let (_, pytorch) = held_after_pruning(Form::Reparametrized);
    // weight_orig, a mask of the weight's dtype, and the recomputed weight.
    assert_eq!(pytorch, 3 * weight);
}
