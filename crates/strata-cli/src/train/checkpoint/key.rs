//! What must be the same for a run to resume from a checkpoint: the options that shape its
//! values, and its data.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};
use strata::core::DType;
use strata::data::Dataset;

use super::super::{Result, TrainOptions};

/// The options that change a run's values, by flag, as text (floats in their shortest exact
/// form). `--epochs` is left out (a run may be resumed to train longer), and so are the
/// loader's workers (batches are the same for any count) and where files go.
pub(crate) fn run_key(o: &TrainOptions) -> BTreeMap<String, String> {
    let or = |v: Option<usize>, none: &str| v.map_or(none.to_owned(), |v| v.to_string());
    let mut key = BTreeMap::new();
    let mut put = |flag: &str, value: String| {
        key.insert(flag.to_owned(), value);
    };
    put("--model", o.model.name().to_owned());
    put("--optimizer", format!("{:?}", o.optimizer).to_lowercase());
    put("--lr", o.lr.to_string());
    put("--momentum", o.momentum.to_string());
    put("--weight-decay", o.weight_decay.to_string());
    put("--batch-size", o.batch_size.to_string());
    put("--seed", o.seed.to_string());
    put(
        "--amp",
        o.amp
            .map_or("off".to_owned(), |d| format!("{d:?}").to_lowercase()),
    );
    put("--train-samples", or(o.train_samples, "all"));
    put("--test-samples", or(o.test_samples, "all"));
    if o.model.is_language_model() {
        put("--steps", o.steps_or_default().to_string());
        put("--eval-every", o.eval_every.to_string());
    }
    put(
        "--optimizer-in-backward",
        o.optimizer_in_backward.to_string(),
    );
    put(
        "--checkpoint-activations",
        o.checkpoint_activations
            .map_or("off".to_owned(), |m| format!("{m:?}").to_lowercase()),
    );
    put("--on-oom", format!("{:?}", o.on_oom).to_lowercase());
    put("--memory-limit", or(o.memory_limit, "none"));
    key
}

/// A split's size and a digest of its first, middle and last samples (every field's
/// values), which tells a different dataset, or the same one cut or normalised otherwise.
fn digest(data: &dyn Dataset) -> Result<String> {
    let n = data.len();
    let mut h = Sha256::new();
    h.update((n as u64).to_le_bytes());
    let mut picks = vec![0, n / 2, n.saturating_sub(1)];
    picks.dedup();
    for i in picks.into_iter().filter(|&i| i < n) {
        for t in data.get(i)? {
            for v in t.to(DType::F64)?.to_vec::<f64>()? {
                h.update(v.to_bits().to_le_bytes());
            }
        }
    }
    Ok(h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect())
}

/// The training and test data as the checkpoint records them.
pub(crate) fn data_key(
    train: &dyn Dataset,
    test: &dyn Dataset,
) -> Result<BTreeMap<String, String>> {
    let mut key = BTreeMap::new();
    for (name, data) in [("training data", train), ("test data", test)] {
        key.insert(
            name.to_owned(),
            format!("{} samples, digest {}", data.len(), digest(data)?),
        );
    }
    Ok(key)
}

/// Each entry where `saved` (the checkpoint's) and `ours` (this run's) differ, in words.
pub(crate) fn differences(
    saved: &BTreeMap<String, String>,
    ours: &BTreeMap<String, String>,
) -> Vec<String> {
    let none = String::from("(not recorded)");
    let mut keys: Vec<&String> = saved.keys().chain(ours.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter_map(|k| {
            let (a, b) = (saved.get(k).unwrap_or(&none), ours.get(k).unwrap_or(&none));
            (a != b).then(|| format!("{k}: the checkpoint's run had {a}, this run has {b}"))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_changed_option_is_named_with_both_values() {
        let a = run_key(&TrainOptions::default());
        let b = run_key(&TrainOptions {
            lr: 2e-3,
            epochs: 9,
            workers: 0,
            ..TrainOptions::default()
        });
        assert_eq!(
            differences(&a, &b),
            ["--lr: the checkpoint's run had 0.001, this run has 0.002"]
        );
    }
}
