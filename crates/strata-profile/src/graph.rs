//! Autograd graphs kept alive from step to step, and graphs built in evaluation.

use std::collections::BTreeMap;

use strata_core::autograd::live_graph;
use strata_core::ProgramLines;
use strata_nn::Module;

use crate::finding::{Finding, FindingKind};
use crate::format::{bytes, place};
use crate::growth::Growth;
use crate::repeat::{Repeats, Say};

#[derive(Debug, Clone, Default)]
struct Usage {
    nodes: usize,
    saved_bytes: usize,
}

/// Call [`GraphWatch::step`] after each iteration (after backward and the optimizer step,
/// when no graph should be left). It tells apart the two ways graphs pile up:
///
/// - nodes grow every step but their saved bytes do not: backward ran and freed the saved
///   tensors, yet something keeps each step's graph (a `Vec` of losses): keep `loss.item()`
///   or `loss.detach()` instead;
/// - nodes and saved bytes grow every step: each step's graph stays whole, as when a
///   tensor carried over (an RNN's hidden state) links every step to the last and backward
///   runs with `retain_graph`: detach the carried state at the start of each step.
///
/// A finding is given in full once, when it first appears; while the graph keeps growing,
/// `step` gives a one-line reminder 10, 20, 40, ... steps later and nothing in between.
/// [`GraphWatch::report`] gives the last step's full finding on demand.
///
/// ```
/// use strata_profile::{FindingKind, GraphWatch};
/// use strata_core::{DType, Tensor};
/// let w = Tensor::ones(&[8], DType::F32)?.requires_grad_(true)?;
/// let mut watch = GraphWatch::with_window(0, 3);
/// let mut losses = Vec::new();
/// let mut found = Vec::new();
/// for _ in 0..5 {
///     let loss = w.mul(&w)?.sum(None, false)?;
///     loss.backward()?;
///     losses.push(loss); // keeps its graph: keep `loss.item()` instead
///     found.extend(watch.step());
/// }
/// assert_eq!(found[0].kind, FindingKind::GraphKept);
/// # Ok::<(), strata_core::Error>(())
/// ```
pub struct GraphWatch {
    warmup: usize,
    steps: usize,
    growth: Growth<Usage>,
    repeats: Repeats,
    last: Vec<Finding>,
    /// Keeps ops attributed to the program's lines while the watch lives, so its findings
    /// name them.
    _lines: ProgramLines,
}

impl Default for GraphWatch {
    fn default() -> Self {
        GraphWatch::new()
    }
}

impl GraphWatch {
    /// A watch that reports after 1 warm-up step and 3 steps of growth.
    pub fn new() -> GraphWatch {
        GraphWatch::with_window(1, 3)
    }

    /// A watch that ignores `warmup` steps and reports growth over `window` steps.
    pub fn with_window(warmup: usize, window: usize) -> GraphWatch {
        GraphWatch {
            warmup,
            steps: 0,
            growth: Growth::new(window),
            repeats: Repeats::default(),
            last: Vec::new(),
            _lines: ProgramLines::record(),
        }
    }

    /// The full finding of the last step, if graphs grew then (whether or not `step` gave it).
    pub fn report(&self) -> Vec<Finding> {
        self.last.clone()
    }

    /// Records the end of an iteration; gives what grew in every one of the last steps when
    /// it is first found, then one-line reminders (see the type's docs).
    pub fn step(&mut self) -> Vec<Finding> {
        self.steps += 1;
        if self.steps <= self.warmup {
            return Vec::new();
        }
        self.last = self.measure();
        let mut said = Vec::new();
        for full in &self.last {
            match self.repeats.say(&format!("{:?}", full.kind), self.steps) {
                Say::Full => said.push(full.clone()),
                Say::Reminder { since } => {
                    let what = match full.kind {
                        FindingKind::CarriedState => "autograd graphs and their saved tensors",
                        _ => "autograd graph nodes",
                    };
                    let (nodes, saved) = self.growth_per_step();
                    said.push(Finding::reminder(
                        full.kind,
                        format!(
                            "{what} still growing, +{nodes} nodes and +{} saved per step since \
                             step {since} (GraphWatch::report() repeats the finding)",
                            bytes(saved)
                        ),
                    ));
                }
                Say::Quiet => {}
            }
        }
        said
    }

    /// Nodes and saved bytes added per step over the window, all sites together.
    fn growth_per_step(&self) -> (usize, usize) {
        let window = self.growth.window();
        self.growth
            .grown(|u| u.nodes)
            .iter()
            .fold((0, 0), |(n, b), (_, then, now)| {
                (
                    n + now.nodes.saturating_sub(then.nodes) / window,
                    b + now.saved_bytes.saturating_sub(then.saved_bytes) / window,
                )
            })
    }

    /// Records this step's graphs and gives the full finding when they grew.
    fn measure(&mut self) -> Vec<Finding> {
        let mut now: BTreeMap<String, Usage> = BTreeMap::new();
        for g in live_graph() {
            let e = now.entry(place(&g.site)).or_default();
            e.nodes += g.nodes;
            e.saved_bytes += g.saved_bytes;
        }
        self.growth.push(now);
        let grown = self.growth.grown(|u| u.nodes);
        if grown.is_empty() {
            return Vec::new();
        }
        let window = self.growth.window();
        let per_step = |then: usize, now: usize| now.saturating_sub(then) / window;
        let saved_grows = grown.iter().any(|(_, t, n)| n.saved_bytes > t.saved_bytes);
        let mut lines: Vec<(usize, String)> = grown
            .iter()
            .map(|(place, then, now)| {
                (
                    now.nodes,
                    format!(
                        "  {place}: +{} nodes per step ({} alive), +{} saved per step ({} \
                         saved)",
                        per_step(then.nodes, now.nodes),
                        now.nodes,
                        bytes(per_step(then.saved_bytes, now.saved_bytes)),
                        bytes(now.saved_bytes)
                    ),
                )
            })
            .collect();
        lines.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let sites = lines
            .into_iter()
            .map(|(_, l)| l)
            .collect::<Vec<_>>()
            .join("\n");
        let finding = if saved_grows {
            Finding::new(
                FindingKind::CarriedState,
                format!(
                    "autograd graphs and their saved tensors grew in each of the last {window} \
                     steps: a tensor carried from step to step (an RNN's hidden state, a \
                     running total) links each step's graph to the one before, and backward \
                     with retain_graph keeps them all. Detach the carried state at the start \
                     of each step (`h = h.detach()?`) and drop retain_graph. The carried tensor \
                     is made at one of:\n{sites}"
                ),
            )
        } else {
            Finding::new(
                FindingKind::GraphKept,
                format!(
                    "autograd graph nodes grew in each of the last {window} steps while their \
                     saved tensors did not: backward ran, but something keeps a tensor from \
                     every step together with its graph (a list of losses or outputs). Keep \
                     `loss.item()` for logging, or `loss.detach()`. Graph kept from:\n{sites}"
                ),
            )
        };
        vec![finding]
    }

    /// Checks evaluation: when every module of `model` is in evaluation mode and autograd
    /// graph is alive, the evaluation built it (it was not run under `no_grad` or
    /// `inference_mode`), and holds its activations until the outputs drop.
    pub fn check_eval(model: &dyn Module) -> Option<Finding> {
        let mut training = false;
        let _ = strata_nn::module::apply_to(model, &mut |m| {
            training |= m.is_training();
            Ok(())
        });
        if training {
            return None;
        }
        let graph = live_graph();
        let nodes: usize = graph.iter().map(|g| g.nodes).sum();
        if nodes == 0 {
            return None;
        }
        let saved: usize = graph.iter().map(|g| g.saved_bytes).sum();
        let top = graph
            .first()
            .map(|g| g.site.to_string())
            .unwrap_or_default();
        Some(Finding::new(
            FindingKind::GraphInEval,
            format!(
                "every module is in evaluation mode, yet {nodes} autograd nodes are alive \
                 holding {} of saved tensors (the largest from {top}): evaluation built a \
                 graph. Run it under `no_grad(|| ...)` or `inference_mode(|| ...)`",
                bytes(saved)
            ),
        ))
    }
}
