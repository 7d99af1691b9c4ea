//! The fixes `explain` tries: allocator settings, and holding less memory, each replayed over
//! the whole trace on the same device, in parallel.

use std::collections::HashSet;
use std::thread;

use serde::Serialize;

use super::super::replay::{PreparedTrace, ReplayOom};
use super::holders::{Holder, Lifetime};
use crate::caching::{AllocatorConfig, ROUNDUP_INTERVALS};

/// `max_split_size_mb` values tried.
const MAX_SPLIT_MB: [usize; 3] = [32, 128, 512];
/// The `roundup_power2_divisions` tried.
const ROUNDUP_DIVISIONS: usize = 4;
/// The `garbage_collection_threshold` tried.
const GC_THRESHOLD: f64 = 0.6;
/// The most holders taken away.
pub(super) const MAX_HOLDERS_REMOVED: usize = 3;

/// What a fix changes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Change {
    /// The recorded run's own settings, unchanged: the baseline the others are measured
    /// against.
    Recorded,
    /// One allocator setting added to the recorded ones (`PYTORCH_CUDA_ALLOC_CONF` or
    /// `STRATA_ALLOC_CONF` syntax).
    Setting {
        /// The setting, as `expandable_segments:True`.
        setting: String,
    },
    /// The recorded settings, without the live blocks of the largest holders at the moment.
    WithoutHolders {
        /// How many holders (the largest first).
        count: usize,
        /// Their bytes.
        bytes: u64,
    },
}

/// One replay of a fix.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Fix {
    /// What it changes.
    pub change: Change,
    /// Peak bytes allocated.
    pub peak_allocated: u64,
    /// Peak bytes reserved.
    pub peak_reserved: u64,
    /// Times the allocator emptied its cache to retry a request.
    pub alloc_retries: u64,
    /// Requests that ran out of memory.
    pub ooms: usize,
    /// The first of them.
    pub first_oom: Option<ReplayOom>,
    /// Whether the replay shows it helps: no out-of-memory where the recorded settings had
    /// one, or (without one) a peak reserved at least 1% lower without causing one.
    pub helps: bool,
}

impl Change {
    /// How the change reads in a table.
    pub fn label(&self) -> String {
        match self {
            Change::Recorded => "the recorded settings".to_owned(),
            Change::Setting { setting } => setting.clone(),
            Change::WithoutHolders { count: 1, .. } => "without the largest holder".to_owned(),
            Change::WithoutHolders { count, .. } => format!("without the {count} largest holders"),
        }
    }
}

/// The settings worth trying over `recorded`: each one the run did not already use.
/// `garbage_collection_threshold` only when a limit is known, since the allocator applies it
/// only under one.
pub(super) fn candidate_settings(
    recorded: &AllocatorConfig,
    limit_known: bool,
) -> Vec<(String, AllocatorConfig)> {
    let mut out = Vec::new();
    if !recorded.expandable_segments {
        let mut c = recorded.clone();
        c.expandable_segments = true;
        out.push(("expandable_segments:True".to_owned(), c));
    }
    for mb in MAX_SPLIT_MB {
        if recorded.max_split_size.is_some_and(|m| m <= mb << 20) {
            continue;
        }
        let mut c = recorded.clone();
        c.max_split_size = Some(mb << 20);
        out.push((format!("max_split_size_mb:{mb}"), c));
    }
    if recorded.roundup_power2_divisions.iter().all(|&d| d == 0) {
        let mut c = recorded.clone();
        c.roundup_power2_divisions = [ROUNDUP_DIVISIONS; ROUNDUP_INTERVALS];
        out.push((format!("roundup_power2_divisions:{ROUNDUP_DIVISIONS}"), c));
    }
    if limit_known && recorded.garbage_collection_threshold == 0.0 {
        let mut c = recorded.clone();
        c.garbage_collection_threshold = GC_THRESHOLD;
        out.push((format!("garbage_collection_threshold:{GC_THRESHOLD}"), c));
    }
    out
}

/// One replay to run.
pub(super) struct Trial {
    pub(super) change: Change,
    pub(super) config: AllocatorConfig,
    /// Entries left out.
    pub(super) skip: HashSet<usize>,
    /// Blocks held from before the trace, left out.
    pub(super) skip_missing: HashSet<u64>,
}

impl Trial {
    /// A replay under `config` of the whole trace.
    pub(super) fn setting(change: Change, config: AllocatorConfig) -> Trial {
        Trial {
            change,
            config,
            skip: HashSet::new(),
            skip_missing: HashSet::new(),
        }
    }

    /// A replay under `config` without the live blocks of the `count` largest `holders`.
    pub(super) fn without_holders(
        holders: &[Holder],
        count: usize,
        config: AllocatorConfig,
    ) -> Trial {
        let mut t = Trial::setting(
            Change::WithoutHolders {
                count,
                bytes: holders.iter().take(count).map(|h| h.bytes).sum(),
            },
            config,
        );
        for l in holders.iter().take(count).flat_map(|h| &h.lifetimes) {
            match l {
                Lifetime::Traced { alloc, frees } => {
                    t.skip.insert(*alloc);
                    t.skip.extend(frees);
                }
                Lifetime::Before { addr, frees } => {
                    t.skip_missing.insert(*addr);
                    t.skip.extend(frees);
                }
            }
        }
        t
    }
}

/// Runs every trial over `trace` with reserved bytes held under `limit`, on as many threads
/// as the machine has (each replay is independent), in the trials' order. `helps` is left
/// false: the caller judges against the baseline.
pub(super) fn run_all(
    trace: &PreparedTrace<'_>,
    limit: Option<u64>,
    trials: Vec<Trial>,
) -> Vec<Fix> {
    let threads = thread::available_parallelism().map_or(1, |n| n.get());
    let mut slots: Vec<Option<Fix>> = vec![None; trials.len()];
    let mut pending: Vec<(usize, Trial)> = trials.into_iter().enumerate().collect();
    while !pending.is_empty() {
        let batch: Vec<(usize, Trial)> = pending.drain(..threads.min(pending.len())).collect();
        thread::scope(|s| {
            let handles: Vec<_> = batch
                .into_iter()
                .map(|(i, t)| {
                    s.spawn(move || {
                        let f = trace.run(t.config, limit, t.skip, &t.skip_missing);
                        (
                            i,
                            Fix {
                                change: t.change,
                                peak_allocated: f.peak_allocated,
                                peak_reserved: f.peak_reserved,
                                alloc_retries: f.alloc_retries,
                                ooms: f.ooms.len(),
                                first_oom: f.ooms.into_iter().next(),
                                helps: false,
                            },
                        )
                    })
                })
                .collect();
            for h in handles {
                // A replay that panicked is a bug in strata; its slot stays empty and the
                // fix is left out rather than taking the whole explanation down.
                if let Ok((i, fix)) = h.join() {
                    slots[i] = Some(fix);
                }
            }
        });
    }
    slots.into_iter().flatten().collect()
}
