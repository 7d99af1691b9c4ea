//! `MultiheadAttention` against PyTorch's: the fixtures under `tests/fixtures/torch/mha-*`
//! were written by `scripts/mha-fixtures.py` (PyTorch's state dict, fixed inputs and masks,
//! its outputs and weights, and the gradients of `(output * w).sum()` for the inputs and
//! every parameter). Each case loads PyTorch's state dict by its keys, runs the same call
//! and compares everything.

mod common;

use std::path::{Path, PathBuf};

use strata_core::{DType, Tensor};

use common::assert_close;
use strata_nn::state::{LoadOptions, StateDict, StateDictExt};
use strata_nn::{AttendOptions, Module, MultiheadAttention, MultiheadAttentionOptions};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/torch")
        .join(name)
}

/// Runs case `name` built with `options` and called with the masks its inputs hold.
fn check(
    name: &str,
    heads: usize,
    options: MultiheadAttentionOptions,
    need_weights: bool,
    average: bool,
) {
    let mha = MultiheadAttention::with_options(8, heads, options).unwrap();
    let dict = StateDict::load(fixture(&format!("mha-{name}.safetensors"))).unwrap();
    let report = mha
        .load_state_dict(
            &dict,
            LoadOptions {
                strict: true,
                assign: false,
            },
        )
        .unwrap();
    assert!(
        report.missing.is_empty() && report.unexpected.is_empty(),
        "{name}"
    );
    let io = StateDict::load(fixture(&format!("mha-{name}.io.safetensors"))).unwrap();
    let input = |key: &str| {
        io.get(key)
            .unwrap()
            .deep_clone()
            .unwrap()
            .requires_grad_(true)
            .unwrap()
    };
    let (q, k, v) = (input("query"), input("key"), input("value"));
    let bool_mask = |key: &str| io.get(key).map(|m| m.to(DType::Bool).unwrap());
    let kpm = bool_mask("key_padding_mask");
    let mask = bool_mask("attn_mask_bool").or_else(|| io.get("attn_mask").cloned());
    let options = AttendOptions {
        key_padding_mask: kpm.as_ref(),
        need_weights,
        attn_mask: mask.as_ref(),
        average_attn_weights: average,
    };
    let (out, weights) = mha.attend(&q, &k, &v, &options).unwrap();
    assert_close(&format!("{name} output"), &out, io.get("output").unwrap());
    match io.get("weights") {
        Some(w) => assert_close(&format!("{name} weights"), &weights.unwrap(), w),
        None => assert!(weights.is_none(), "{name}"),
    }
    out.mul(io.get("w").unwrap())
        .unwrap()
        .sum(None, false)
        .unwrap()
        .backward()
        .unwrap();
    for (key, t) in [("query", &q), ("key", &k), ("value", &v)] {
        assert_close(
            &format!("{name} grad.{key}"),
            &t.grad().unwrap(),
            io.get(&format!("grad.{key}")).unwrap(),
        );
    }
    for (key, p) in mha.named_parameters() {
        assert_close(
            &format!("{name} grad.{key}"),
            &p.grad().unwrap(),
            io.get(&format!("grad.{key}")).unwrap(),
        );
    }
}

#[test]
fn self_attention_with_weights_averaged_over_heads() {
    check("self", 2, MultiheadAttentionOptions::default(), true, true);
}

#[test]
fn cross_attention_batch_first_with_padding_and_a_bool_mask_through_sdpa() {
    let options = MultiheadAttentionOptions {
        batch_first: true,
        ..Default::default()
    };
    check("cross", 4, options, false, true);
}

#[test]
fn separate_key_and_value_widths_with_a_float_mask_and_per_head_weights() {
    let options = MultiheadAttentionOptions {
        batch_first: true,
        kdim: Some(5),
        vdim: Some(3),
        ..Default::default()
    };
    check("kvdim", 2, options, true, false);
}

#[test]
fn no_biases_and_an_unbatched_input() {
    let options = MultiheadAttentionOptions {
        bias: false,
        ..Default::default()
    };
    check("nobias", 2, options, true, true);
}

#[test]
fn a_mask_per_batch_and_head() {
    check(
        "mask3d",
        2,
        MultiheadAttentionOptions::default(),
        false,
        true,
    );
}

#[test]
fn parameters_keys_and_errors_are_pytorchs() {
    let mha = MultiheadAttention::new(8, 2).unwrap();
    let keys: Vec<String> = mha.named_parameters().into_iter().map(|(k, _)| k).collect();
    assert_eq!(
        keys,
        [
            "in_proj_weight",
            "in_proj_bias",
            "out_proj.weight",
            "out_proj.bias"
        ]
    );
    let e = MultiheadAttention::new(8, 3).unwrap_err();
    assert!(e.to_string().contains("divisible"), "{e}");
    let x = Tensor::ones(&[2, 3, 6], DType::F32).unwrap();
    let e = mha.call(&x).unwrap_err();
    assert!(e.to_string().contains("embedding dimension of 8"), "{e}");
}
