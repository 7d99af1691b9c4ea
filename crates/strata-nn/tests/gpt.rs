//! nanoGPT's GPT: its state-dict keys, the tied head, its initialisation, the causal
//! property, and whole-block checkpointing giving the same gradients.

use strata_core::memory::memory_allocated;
use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{manual_seed, DType, Device, Tensor};
use strata_nn::gpt::{Gpt, GptConfig};
use strata_nn::state::{LoadOptions, StateDict, StateDictExt};
use strata_nn::{Checkpointing, Module};

/// The global generator is the process's: tests that seed it run one at a time.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn small() -> GptConfig {
    GptConfig {
        vocab_size: 11,
        block_size: 8,
        n_layer: 2,
        n_head: 2,
        n_embd: 16,
    }
}

fn tokens(b: usize, t: usize, vocab: usize) -> Tensor {
    let v: Vec<i64> = (0..b * t).map(|i| ((i * 7 + 3) % vocab) as i64).collect();
    Tensor::from_vec(v, &[b, t]).expect("tokens")
}

#[test]
fn the_state_dict_has_nanogpts_keys_and_the_head_is_tied() {
    let _serial = serial();
    manual_seed(0);
    let model = Gpt::new(&GptConfig::shakespeare_char(84)).expect("model");
    let keys: Vec<String> = model
        .state_dict()
        .iter()
        .map(|(k, _)| k.to_owned())
        .collect();
    let mut expected = vec![
        "transformer.wte.weight".to_owned(),
        "transformer.wpe.weight".to_owned(),
    ];
    for i in 0..4 {
        for k in [
            "ln_1.weight",
            "attn.c_attn.weight",
            "attn.c_proj.weight",
            "ln_2.weight",
            "mlp.c_fc.weight",
            "mlp.c_proj.weight",
        ] {
            expected.push(format!("transformer.h.{i}.{k}"));
        }
    }
    expected.push("transformer.ln_f.weight".to_owned());
    expected.push("lm_head.weight".to_owned());
    assert_eq!(keys, expected);
    let dict = model.state_dict();
    let shape = |k: &str| dict.get(k).expect(k).shape().to_vec();
    assert_eq!(shape("transformer.wte.weight"), [84, 128]);
    assert_eq!(shape("transformer.wpe.weight"), [64, 128]);
    assert_eq!(shape("transformer.h.0.attn.c_attn.weight"), [384, 128]);
    assert_eq!(shape("transformer.h.3.mlp.c_proj.weight"), [128, 512]);
    // The tied weight is one parameter: nanoGPT's 0.81M.
    let params = model.parameters();
    let count: usize = params.iter().map(Tensor::numel).sum();
    assert_eq!(count, 806_528);
    assert_eq!(params.len(), 2 + 4 * 6 + 1);
    let head = dict.get("lm_head.weight").expect("head");
    let wte = dict.get("transformer.wte.weight").expect("wte");
    assert_eq!(
        head.to_vec::<f32>().expect("values"),
        wte.to_vec::<f32>().expect("values")
    );
}

#[test]
fn initialisation_follows_nanogpt() {
    let _serial = serial();
    manual_seed(1);
    let model = Gpt::new(&GptConfig::shakespeare_char(84)).expect("model");
    let dict = model.state_dict();
    let std = |k: &str| {
        let v = dict.get(k).expect(k).to_vec::<f32>().expect("values");
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        (v.iter()
            .map(|&x| (f64::from(x) - mean).powi(2))
            .sum::<f64>()
            / n)
            .sqrt()
    };
    assert!((std("transformer.h.0.mlp.c_fc.weight") - 0.02).abs() < 0.001);
    assert!((std("transformer.wte.weight") - 0.02).abs() < 0.002);
    let residual = 0.02 / 8f64.sqrt();
    assert!((std("transformer.h.1.attn.c_proj.weight") - residual).abs() < 0.0005);
    assert!((std("transformer.h.2.mlp.c_proj.weight") - residual).abs() < 0.0005);
    let ln = dict.get("transformer.ln_f.weight").expect("ln_f");
    assert!(ln
        .to_vec::<f32>()
        .expect("values")
        .iter()
        .all(|&x| x == 1.0));
}

#[test]
fn either_name_of_the_tied_weight_loads_it() {
    let _serial = serial();
    manual_seed(2);
    let source = Gpt::new(&small()).expect("source");
    let full = source.state_dict();
    for dropped in ["lm_head.weight", "transformer.wte.weight"] {
        manual_seed(3);
        let target = Gpt::new(&small()).expect("target");
        let partial: StateDict = full
            .iter()
            .filter(|(k, _)| *k != dropped)
            .map(|(k, t)| (k.to_owned(), t.clone()))
            .collect();
        let report = target
            .load_state_dict(&partial, LoadOptions::default())
            .expect("one name of the tied weight is enough");
        assert!(report.missing.is_empty(), "{dropped}: {report:?}");
        let loaded = target.state_dict();
        for key in ["lm_head.weight", "transformer.wte.weight"] {
            assert_eq!(
                loaded.get(key).expect(key).to_vec::<f32>().expect("values"),
                full.get("transformer.wte.weight")
                    .expect("wte")
                    .to_vec::<f32>()
                    .expect("values"),
                "{key} after loading without {dropped}"
            );
        }
    }
    // Without either, the load names the missing keys.
    let target = Gpt::new(&small()).expect("target");
    let none: StateDict = full
        .iter()
        .filter(|(k, _)| !k.ends_with("wte.weight") && *k != "lm_head.weight")
        .map(|(k, t)| (k.to_owned(), t.clone()))
        .collect();
    let err = target
        .load_state_dict(&none, LoadOptions::default())
        .expect_err("the tied weight is missing under both names");
    let text = err.to_string();
    assert!(
        text.contains("lm_head.weight") && text.contains("transformer.wte.weight"),
        "{text}"
    );
}

#[test]
fn a_position_sees_only_the_tokens_before_it() {
    let _serial = serial();
    manual_seed(4);
    let model = Gpt::new(&small()).expect("model");
    let a = tokens(1, 8, 11);
    let mut changed = a.to_vec::<i64>().expect("values");
    changed[5] = (changed[5] + 1) % 11;
    let b = Tensor::from_vec(changed, &[1, 8]).expect("tokens");
    let la = model
        .call(&a)
        .expect("logits")
        .to_vec::<f32>()
        .expect("values");
    let lb = model
        .call(&b)
        .expect("logits")
        .to_vec::<f32>()
        .expect("values");
    let v = 11;
    assert_eq!(la[..5 * v], lb[..5 * v], "positions before the change");
    assert_ne!(la[5 * v..6 * v], lb[5 * v..6 * v], "the changed position");
}

#[test]
fn checkpointed_blocks_give_the_same_gradients() {
    let _serial = serial();
    // The parameters' gradients, and the bytes the forward left allocated (what backward
    // will need, and the logits).
    let grads = |checkpointing: &Checkpointing| {
        manual_seed(5);
        let model = Gpt::new(&small()).expect("model");
        let x = tokens(3, 8, 11);
        let y = tokens(3, 8, 11).roll(&[1], &[1]).expect("targets");
        let before = memory_allocated(Device::Cpu).expect("allocated");
        let logits = model.logits(&x, checkpointing).expect("logits");
        let held = memory_allocated(Device::Cpu).expect("allocated") - before;
        let loss = cross_entropy(
            &logits.reshape(&[-1, 11]).expect("flat"),
            &y.reshape(&[-1]).expect("flat"),
            Reduction::Mean,
        )
        .expect("loss");
        loss.backward().expect("backward");
        let grads = model
            .parameters()
            .iter()
            .map(|p| {
                p.grad()
                    .expect("a gradient")
                    .to_vec::<f32>()
                    .expect("values")
            })
            .collect::<Vec<_>>();
        (grads, held)
    };
    let (plain, plain_held) = grads(&Checkpointing::Off);
    let (full, full_held) = grads(&Checkpointing::Full);
    let (selective, selective_held) = grads(&Checkpointing::Selective(Gpt::selective_policy()));
    assert!(
        full_held < selective_held && selective_held < plain_held,
        "held after forward: full {full_held}, selective {selective_held}, plain {plain_held}"
    );
    for checked in [&full, &selective] {
        for (i, (p, c)) in plain.iter().zip(checked).enumerate() {
            for (a, b) in p.iter().zip(c) {
                assert!(
                    (a - b).abs() <= 1e-6 * (1.0 + a.abs()),
                    "parameter {i}: {a} against {b}"
                );
            }
        }
    }
}

#[test]
fn bad_inputs_are_errors() {
    let _serial = serial();
    manual_seed(6);
    let model = Gpt::new(&small()).expect("model");
    let long = tokens(1, 9, 11);
    let err = model.call(&long).expect_err("longer than the context");
    assert!(
        err.to_string().contains("longer than the context of 8"),
        "{err}"
    );
    let floats = Tensor::zeros(&[1, 4], DType::F32).expect("floats");
    assert!(model.call(&floats).is_err());
    let flat = tokens(1, 4, 11).reshape(&[4]).expect("1-d");
    assert!(model.call(&flat).is_err());
    let bad = GptConfig {
        n_head: 3,
        ..small()
    };
    assert!(Gpt::new(&bad).is_err());
}

#[test]
fn the_key_value_cache_gives_the_full_forwards_logits() {
    use strata_core::autograd::inference_mode;
    use strata_core::Device;
    use strata_nn::gpt::KvCache;
    let _serial = serial();
    manual_seed(7);
    let config = small();
    let model = Gpt::new(&config).expect("model");
    let seq = tokens(1, 8, 11);
    let values = seq.to_vec::<i64>().expect("values");
    inference_mode(|| {
        let full = model.call(&seq).expect("logits");
        let row = |i: usize| {
            full.select(1, i as i64)
                .expect("a position")
                .to_vec::<f32>()
                .expect("values")
        };
        let mut cache = KvCache::new(&config, 1, Device::Cpu, DType::F32).expect("cache");
        assert_eq!(cache.bytes(), 2 * 2 * 8 * 16 * 4);
        let close = |a: &[f32], b: &[f32], what: &str| {
            for (x, y) in a.iter().zip(b) {
                assert!((x - y).abs() < 1e-5, "{what}: {x} against {y}");
            }
        };
        let prompt = seq.narrow(1, 0, 3).expect("prompt");
        let logits = model.forward_cached(&prompt, &mut cache).expect("prompt");
        close(
            &logits.to_vec::<f32>().expect("values"),
            &row(2),
            "the prompt",
        );
        for (i, &t) in values.iter().enumerate().skip(3) {
            let one = Tensor::from_vec(vec![t], &[1, 1]).expect("a token");
            let logits = model.forward_cached(&one, &mut cache).expect("a step");
            close(
                &logits.to_vec::<f32>().expect("values"),
                &row(i),
                "a cached step",
            );
        }
        assert_eq!(cache.len(), 8);
        // The context is full: another token is an error that says what to do.
        let one = Tensor::from_vec(vec![1i64], &[1, 1]).expect("a token");
        let err = model
            .forward_cached(&one, &mut cache)
            .expect_err("past the context");
        assert!(err.to_string().contains("clear the cache"), "{err}");
    });
}

#[test]
fn sampling_keeps_to_the_top_k_and_follows_the_temperature() {
    use strata_core::Generator;
    use strata_nn::gpt::Sampling;
    let logits = [0.0f32, 3.0, 1.0, 2.5];
    let top2 = Sampling {
        temperature: 1.0,
        top_k: Some(2),
    };
    let mut g = Generator::new(3);
    let mut counts = [0usize; 4];
    for _ in 0..2000 {
        counts[top2.draw(&logits, &mut g).expect("a draw")] += 1;
    }
    assert_eq!(counts[0] + counts[2], 0, "{counts:?}");
    // p(1)/p(3) = e^0.5 = 1.65.
    let ratio = counts[1] as f64 / counts[3] as f64;
    assert!((ratio - 0.5f64.exp()).abs() < 0.2, "{counts:?}");
    let cold = Sampling {
        temperature: 0.01,
        top_k: None,
    };
    assert_eq!(cold.draw(&logits, &mut g).expect("a draw"), 1);
    let bad = Sampling {
        temperature: 0.0,
        top_k: None,
    };
    assert!(bad.draw(&logits, &mut g).is_err());
}
