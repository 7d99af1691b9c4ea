//! State dicts shared with PyTorch. The fixtures under `tests/fixtures/torch` were written
//! by `scripts/nn-fixtures.py make` (PyTorch's `safetensors.torch.save_file` of an MLP, a
//! small CNN with BatchNorm after three training batches, and a two-layer LSTM, with fixed
//! inputs and PyTorch's outputs); these tests load them into the same strata models and
//! reproduce PyTorch's outputs. They also write strata's own files, which
//! `scripts/nn-fixtures.py check DIR` loads into PyTorch (the tests need no torch).

mod common;

use std::path::{Path, PathBuf};

use strata_core::Tensor;

use common::assert_close;
use strata_nn::state::{LoadOptions, StateDict, StateDictExt};
use strata_nn::{
    BatchNorm2d, Conv2d, Conv2dConfig, Flatten, Linear, MaxPool2d, Module, ReLU, RnnConfig,
    Sequential, LSTM,
};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/torch")
}

fn mlp() -> Sequential {
    Sequential::new()
        .append(Linear::new(12, 16, true).unwrap())
        .unwrap()
        .append(ReLU::new())
        .unwrap()
        .append(Linear::new(16, 5, true).unwrap())
        .unwrap()
}

fn cnn() -> Sequential {
    let conv = Conv2d::with_config(
        1,
        4,
        3,
        Conv2dConfig {
            padding: 1.into(),
            ..Default::default()
        },
    )
    .unwrap();
    Sequential::new()
        .append(conv)
        .unwrap()
        .append(BatchNorm2d::new(4).unwrap())
        .unwrap()
        .append(ReLU::new())
        .unwrap()
        .append(MaxPool2d::new(2))
        .unwrap()
        .append(Flatten::new())
        .unwrap()
        .append(Linear::new(64, 3, true).unwrap())
        .unwrap()
}

fn lstm() -> LSTM {
    let config = RnnConfig {
        num_layers: 2,
        batch_first: true,
        ..Default::default()
    };
    LSTM::with_config(4, 6, config).unwrap()
}

/// The model's outputs on `x`, named as in the io files.
fn outputs(
    name: &str,
    model: &dyn Module,
    lstm: Option<&LSTM>,
    x: &Tensor,
) -> Vec<(String, Tensor)> {
    match lstm {
        Some(l) => {
            let (out, (h, c)) = l.call_with(x, None).unwrap();
            vec![("output".into(), out), ("h_n".into(), h), ("c_n".into(), c)]
        }
        None => {
            let _ = name;
            vec![("output".into(), model.call(x).unwrap())]
        }
    }
}

/// Each model with each load mode reproduces PyTorch's outputs.
#[test]
fn pytorch_files_load_and_reproduce_pytorch_outputs() {
    for name in ["mlp", "cnn", "lstm"] {
        for assign in [false, true] {
            let l = lstm();
            let model: Box<dyn Module> = match name {
                "mlp" => Box::new(mlp()),
                "cnn" => Box::new(cnn()),
                _ => Box::new(l.clone()),
            };
            let dict = StateDict::load(fixtures().join(format!("{name}.safetensors"))).unwrap();
            let report = model
                .load_state_dict(
                    &dict,
                    LoadOptions {
                        strict: true,
                        assign,
                    },
                )
                .unwrap();
            assert!(report.missing.is_empty() && report.unexpected.is_empty());
            model.eval();
            let io = StateDict::load(fixtures().join(format!("{name}.io.safetensors"))).unwrap();
            let x = io.get("input").unwrap();
            let lstm_ref = (name == "lstm").then_some(&l);
            for (key, got) in outputs(name, model.as_ref(), lstm_ref, x) {
                assert_close(
                    &format!("{name} {key} (assign {assign})"),
                    &got,
                    io.get(&key).unwrap(),
                );
            }
        }
    }
}

/// The CNN's batch-norm buffers arrive with PyTorch's values, `num_batches_tracked` as i64.
#[test]
fn batch_norm_buffers_load_with_their_dtypes() {
    let model = cnn();
    let dict = StateDict::load(fixtures().join("cnn.safetensors")).unwrap();
    model
        .load_state_dict(&dict, LoadOptions::default())
        .unwrap();
    let ours = model.state_dict();
    let tracked = ours.get("1.num_batches_tracked").unwrap();
    assert_eq!(tracked.dtype(), strata_core::DType::I64);
    assert_eq!(tracked.to_vec::<i64>().unwrap(), vec![3]);
    assert_eq!(
        ours.get("1.running_var").unwrap().to_vec::<f32>().unwrap(),
        dict.get("1.running_var").unwrap().to_vec::<f32>().unwrap()
    );
}

/// Files strata saves hold PyTorch's keys and round-trip; `scripts/nn-fixtures.py check`
/// loads the same files into PyTorch.
#[test]
fn strata_files_round_trip_under_pytorch_keys() {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("nn-interop");
    std::fs::create_dir_all(&dir).unwrap();
    for name in ["mlp", "cnn", "lstm"] {
        let l = lstm();
        let model: Box<dyn Module> = match name {
            "mlp" => Box::new(mlp()),
            "cnn" => Box::new(cnn()),
            _ => Box::new(l.clone()),
        };
        let torch = StateDict::load(fixtures().join(format!("{name}.safetensors"))).unwrap();
        let mut keys = model.state_dict().keys();
        let mut want = torch.keys();
        keys.sort();
        want.sort();
        assert_eq!(keys, want, "{name}: strata's keys are PyTorch's");
        model.eval();
        let x = StateDict::load(fixtures().join(format!("{name}.io.safetensors")))
            .unwrap()
            .get("input")
            .unwrap()
            .clone();
        let lstm_ref = (name == "lstm").then_some(&l);
        let outs = outputs(name, model.as_ref(), lstm_ref, &x);
        model
            .state_dict()
            .save(dir.join(format!("{name}.safetensors")))
            .unwrap();
        let mut io = StateDict::new();
        io.insert("input", x.clone());
        for (k, t) in &outs {
            io.insert(k.clone(), t.contiguous().unwrap());
        }
        io.save(dir.join(format!("{name}.io.safetensors"))).unwrap();
        // Back into a fresh model: the same outputs.
        let l2 = lstm();
        let again: Box<dyn Module> = match name {
            "mlp" => Box::new(mlp()),
            "cnn" => Box::new(cnn()),
            _ => Box::new(l2.clone()),
        };
        let saved = StateDict::load(dir.join(format!("{name}.safetensors"))).unwrap();
        again
            .load_state_dict(&saved, LoadOptions::default())
            .unwrap();
        again.eval();
        let lstm_ref = (name == "lstm").then_some(&l2);
        for ((k, a), (_, b)) in outputs(name, again.as_ref(), lstm_ref, &x)
            .iter()
            .zip(&outs)
        {
            assert_close(&format!("{name} {k} after a round trip"), a, b);
        }
    }
}
