//! The running figures of a run that its report is made from, kept in one place so that a
//! checkpoint can carry them and a resumed run reports as the uninterrupted one would.
//! Floats are stored by their bits, so that they come back exactly (NaN included).

use serde::{Deserialize, Serialize};

use super::measure::Measured;
use super::report::Evaluation;

/// The report's figures so far, and those of the round being trained.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct Figures {
    /// Mean training loss of each finished round.
    #[serde(with = "bits::vec")]
    pub train_loss: Vec<f64>,
    /// Training time of each finished round.
    #[serde(with = "bits::vec")]
    pub round_seconds: Vec<f64>,
    /// Test accuracy after each finished epoch (the classifiers).
    #[serde(with = "bits::vec")]
    pub accuracy: Vec<f64>,
    /// The last evaluation's test loss (the classifiers).
    #[serde(with = "bits::option")]
    pub test_loss: Option<f64>,
    /// The evaluations of a model trained by steps.
    pub evaluations: Vec<EvaluationBits>,
    /// Time the steps waited for the loader.
    #[serde(with = "bits")]
    pub data_wait: f64,
    /// Samples trained on in finished rounds.
    pub samples: usize,
    /// Steps run in parts.
    pub split_steps: usize,
    /// What the leak and graph watches found.
    pub findings: Vec<String>,
    /// The measured step, once it has run.
    pub measured: Option<Measured>,
    /// The round being trained: its samples' summed loss, its samples, its time so far.
    #[serde(with = "bits")]
    pub round_loss_sum: f64,
    pub round_samples: usize,
    #[serde(with = "bits")]
    pub round_elapsed: f64,
}

/// An [`Evaluation`] with its floats as bits.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) struct EvaluationBits {
    step: usize,
    #[serde(with = "bits::option")]
    train_loss: Option<f64>,
    #[serde(with = "bits::option")]
    val_loss: Option<f64>,
}

impl From<Evaluation> for EvaluationBits {
    fn from(e: Evaluation) -> Self {
        EvaluationBits {
            step: e.step,
            train_loss: e.train_loss,
            val_loss: e.val_loss,
        }
    }
}

impl From<EvaluationBits> for Evaluation {
    fn from(e: EvaluationBits) -> Self {
        Evaluation {
            step: e.step,
            train_loss: e.train_loss,
            val_loss: e.val_loss,
        }
    }
}

/// `f64` (and lists and options of it) serialized as the `u64` of its bits.
mod bits {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
        v.to_bits().serialize(s)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
        u64::deserialize(d).map(f64::from_bits)
    }

    pub mod vec {
        use super::*;

        pub fn serialize<S: Serializer>(v: &[f64], s: S) -> Result<S::Ok, S::Error> {
            let words: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
            words.serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
            Ok(Vec::<u64>::deserialize(d)?
                .into_iter()
                .map(f64::from_bits)
                .collect())
        }
    }

    pub mod option {
        use super::*;

        pub fn serialize<S: Serializer>(v: &Option<f64>, s: S) -> Result<S::Ok, S::Error> {
            v.map(f64::to_bits).serialize(s)
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
            Ok(Option::<u64>::deserialize(d)?.map(f64::from_bits))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn floats_come_back_bit_for_bit() {
        let f = Figures {
            train_loss: vec![0.1 + 0.2, f64::NAN, -0.0],
            test_loss: Some(f64::INFINITY),
            round_loss_sum: 1.0 / 3.0,
            evaluations: vec![Evaluation {
                step: 4,
                train_loss: Some(2.5e-300),
                val_loss: None,
            }
            .into()],
            ..Figures::default()
        };
        let text = serde_json::to_string(&f).unwrap();
        let back: Figures = serde_json::from_str(&text).unwrap();
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&back.train_loss), bits(&f.train_loss));
        assert_eq!(back.test_loss, Some(f64::INFINITY));
        assert_eq!(back.round_loss_sum.to_bits(), (1.0f64 / 3.0).to_bits());
        assert_eq!(
            Evaluation::from(back.evaluations[0]).train_loss,
            Some(2.5e-300)
        );
    }
}
