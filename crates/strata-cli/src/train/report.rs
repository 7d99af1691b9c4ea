//! What a training run reports: accuracy and loss per epoch, time, the loader's share, and
//! where memory went in the measured step; as text and as JSON.

use std::collections::BTreeMap;
use std::fmt::Write;

use serde::Serialize;
use strata::alloc::caching::format_size;

/// A run's results (`--report-json` writes this).
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The model trained.
    pub model: String,
    /// The device it ran on (`cpu`, or `meta`: allocations without values).
    pub device: String,
    /// Test accuracy after the last epoch, a fraction (null on meta).
    pub test_accuracy: Option<f64>,
    /// Mean test loss after the last epoch (null on meta).
    pub test_loss: Option<f64>,
    /// Test accuracy after each epoch (null on meta).
    pub test_accuracy_per_epoch: Option<Vec<f64>>,
    /// Mean training loss of each epoch, or of the steps between two evaluations of a
    /// model trained by steps (null on meta).
    pub train_loss: Option<Vec<f64>>,
    /// The validation loss at the last evaluation of a model trained by steps (null for the
    /// classifiers and on meta).
    pub val_loss: Option<f64>,
    /// Each evaluation of a model trained by steps (empty for the classifiers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub evaluations: Vec<Evaluation>,
    /// Wall time of each epoch's training, or of the steps between two evaluations
    /// (evaluation excluded).
    pub epoch_seconds: Vec<f64>,
    /// Time the training step waited for the loader, all epochs.
    pub data_wait_seconds: f64,
    /// Training samples per second over all epochs.
    pub samples_per_second: f64,
    /// Peak allocated bytes of the measured step (its own allocator).
    pub step_peak_allocated: usize,
    /// Peak reserved bytes of the measured step.
    pub step_peak_reserved: usize,
    /// Peak of the bytes the step's ops asked for (unrounded; what PyTorch's profiler counts).
    pub step_peak_requested: usize,
    /// Bytes by category at the moment of the measured step's peak: the step's own blocks
    /// as marked then, plus what lived on the run's allocator through the step (parameters,
    /// optimizer state, the batch).
    pub categories_at_peak: BTreeMap<String, usize>,
    /// The allocation sites holding the most memory at the end of the measured step's
    /// forward, largest first: `site: bytes`.
    pub top_holders: Vec<String>,
    /// Steps run in parts (halves, or smaller) after running out of memory.
    pub split_steps: usize,
    /// What split steps change in the result, when it is more than float rounding.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub split_note: Option<String>,
    /// Peak allocated and reserved bytes of the whole run on the default allocator.
    pub run_peak_allocated: usize,
    /// See `run_peak_allocated`.
    pub run_peak_reserved: usize,
    /// What the leak and graph watches found (empty: nothing).
    pub watch_findings: Vec<String>,
    /// The checkpoint a resumed run started from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resumed_from: Option<String>,
    /// What was wrong with checkpoints newer than the one resumed from, or that there was
    /// none to resume from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checkpoint_notes: Vec<String>,
    /// The profiler's table of the profiled steps, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub profile_table: Option<String>,
    /// The ranks of a distributed run (`strata train --distributed`); absent for one
    /// process. The figures above are then rank 0's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub world_size: Option<usize>,
    /// Each rank's memory and communication, rank 0 first (distributed runs only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<RankFigures>>,
}

/// One rank's figures in a distributed run.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct RankFigures {
    /// The rank.
    pub rank: usize,
    /// The compute threads it ran with.
    pub threads: usize,
    /// Its measured step's peak allocated bytes.
    pub step_peak_allocated: usize,
    /// Its measured step's peak reserved bytes.
    pub step_peak_reserved: usize,
    /// Its whole run's peak allocated bytes.
    pub run_peak_allocated: usize,
    /// What it holds between steps: parameters, gradient buckets and its optimizer state
    /// (its shard of it with `--zero`).
    pub persistent_bytes: usize,
    /// Seconds its gradient all-reduces ran per step (`None` on meta, which runs none).
    pub allreduce_seconds_per_step: Option<f64>,
    /// The share of that time hidden behind the rest of backward (0 to 1).
    pub allreduce_hidden_share: Option<f64>,
}

/// One evaluation of a model trained by steps.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Evaluation {
    /// Optimizer steps taken before it.
    pub step: usize,
    /// Mean training loss of the steps since the previous evaluation (null on meta).
    pub train_loss: Option<f64>,
    /// Mean cross-entropy over every prediction of the validation windows (null on meta).
    pub val_loss: Option<f64>,
}

impl Report {
    /// The report for a terminal.
    pub fn text(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "model {} on {}", self.model, self.device);
        for note in &self.checkpoint_notes {
            let _ = writeln!(out, "checkpoints: {note}");
        }
        if let Some(from) = &self.resumed_from {
            let _ = writeln!(out, "resumed from {from}");
        }
        for (e, secs) in self.evaluations.iter().zip(&self.epoch_seconds) {
            match (e.train_loss, e.val_loss) {
                (Some(train), Some(val)) => {
                    let _ = writeln!(
                        out,
                        "step {}: train loss {train:.4}, val loss {val:.4}, {secs:.1} s",
                        e.step
                    );
                }
                _ => {
                    let _ = writeln!(out, "step {}: {secs:.2} s (no values on meta)", e.step);
                }
            }
        }
        match (&self.train_loss, &self.test_accuracy_per_epoch) {
            _ if !self.evaluations.is_empty() => {}
            (Some(losses), Some(accuracy)) => {
                for (i, ((loss, secs), acc)) in losses
                    .iter()
                    .zip(&self.epoch_seconds)
                    .zip(accuracy)
                    .enumerate()
                {
                    let _ = writeln!(
                        out,
                        "epoch {}: train loss {loss:.4}, test accuracy {:.2}%, {secs:.1} s",
                        i + 1,
                        100.0 * acc
                    );
                }
            }
            _ => {
                for (i, secs) in self.epoch_seconds.iter().enumerate() {
                    let _ = writeln!(out, "epoch {}: {secs:.2} s (no values on meta)", i + 1);
                }
            }
        }
        if let Some(val) = self.val_loss {
            let _ = writeln!(
                out,
                "val loss {val:.4}; {:.0} samples/s; waited {:.2} s for data",
                self.samples_per_second, self.data_wait_seconds
            );
        }
        if let (Some(acc), Some(loss)) = (self.test_accuracy, self.test_loss) {
            let _ = writeln!(
                out,
                "test accuracy {:.2}%, test loss {loss:.4}; {:.0} samples/s; waited {:.2} s for data",
                100.0 * acc,
                self.samples_per_second,
                self.data_wait_seconds
            );
        }
        let _ = writeln!(
            out,
            "memory of one training step (measured alone, on an allocator of its own):"
        );
        let _ = writeln!(
            out,
            "  peak allocated {}, reserved {}, requested {}",
            format_size(self.step_peak_allocated),
            format_size(self.step_peak_reserved),
            format_size(self.step_peak_requested)
        );
        let _ = writeln!(
            out,
            "  reserved beyond allocated (peak to peak): {} (cache and fragmentation)",
            format_size(
                self.step_peak_reserved
                    .saturating_sub(self.step_peak_allocated)
            )
        );
        let _ = writeln!(
            out,
            "the run's allocator at that step's peak, by category (the step plus what the \
             run held beside it: model, optimizer state, batches):"
        );
        for (name, bytes) in &self.categories_at_peak {
            let _ = writeln!(out, "  {name:<16} {:>12}", format_size(*bytes));
        }
        let total: usize = self.categories_at_peak.values().sum();
        let _ = writeln!(out, "  {:<16} {:>12}", "total", format_size(total));
        if !self.top_holders.is_empty() {
            let _ = writeln!(out, "largest holders after the forward:");
            for h in &self.top_holders {
                let _ = writeln!(out, "  {h}");
            }
        }
        let _ = writeln!(
            out,
            "run peak allocated {}, reserved {}; split steps {}",
            format_size(self.run_peak_allocated),
            format_size(self.run_peak_reserved),
            self.split_steps
        );
        if let Some(note) = &self.split_note {
            let _ = writeln!(out, "  {note}");
        }
        if let Some(t) = &self.profile_table {
            let _ = writeln!(out, "profile of two steps (after the measured one):\n{t}");
        }
        if let (Some(world), Some(ranks)) = (self.world_size, &self.ranks) {
            let _ = writeln!(
                out,
                "{world} ranks (the figures above are rank 0's); each rank's memory and \
                 gradient all-reduce:"
            );
            for r in ranks {
                let comm = match (r.allreduce_seconds_per_step, r.allreduce_hidden_share) {
                    (Some(s), Some(h)) => format!(
                        "; all-reduce {:.1} ms per step, {:.0}% hidden behind backward",
                        1e3 * s,
                        100.0 * h
                    ),
                    _ => String::new(),
                };
                let _ = writeln!(
                    out,
                    "  rank {} ({} threads): step peak allocated {}, reserved {}; run peak \
                     allocated {}; persistent {}{comm}",
                    r.rank,
                    r.threads,
                    format_size(r.step_peak_allocated),
                    format_size(r.step_peak_reserved),
                    format_size(r.run_peak_allocated),
                    format_size(r.persistent_bytes)
                );
            }
        }
        if self.watch_findings.is_empty() {
            let _ = writeln!(out, "leak and graph watches: nothing found");
        } else {
            for f in &self.watch_findings {
                let _ = writeln!(out, "watch: {f}");
            }
        }
        out
    }
}
