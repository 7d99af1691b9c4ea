//! Fault injection for the crash tests: with `STRATA_CRASH_AT=<point>:<n>` in the
//! environment, the process aborts (as a kill would end it: no destructor runs, no buffer
//! is flushed) the n-th time, counted from 1, that it passes the named point. Without the
//! variable a point costs one load of a cached value.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that names the point and the pass.
pub const VARIABLE: &str = "STRATA_CRASH_AT";

/// In a distributed run, the only rank (Open MPI's `OMPI_COMM_WORLD_RANK`) that aborts;
/// every rank when unset.
pub const RANK_VARIABLE: &str = "STRATA_CRASH_RANK";

/// Whether this process is the rank [`RANK_VARIABLE`] names (true when it names none).
fn is_chosen_rank() -> bool {
    match std::env::var(RANK_VARIABLE) {
        Ok(chosen) => std::env::var("OMPI_COMM_WORLD_RANK").is_ok_and(|r| r == chosen),
        Err(_) => true,
    }
}

/// Every point `strata train` passes, in the order a step meets them.
pub const POINTS: &[(&str, &str)] = &[
    (
        "after-backward",
        "in a training step, after backward, before the optimizer step",
    ),
    (
        "after-step",
        "after the optimizer step, before the gradients are cleared",
    ),
    (
        "checkpoint-write",
        "half-way through writing a checkpoint's temporary file, before it is synced and renamed",
    ),
    (
        "checkpoint-rename",
        "after a checkpoint is renamed into place, before its folder is synced",
    ),
    (
        "epoch-end",
        "after an epoch's checkpoint, before the next epoch starts",
    ),
];

/// The point and pass the variable names, parsed once.
fn target() -> &'static Result<Option<(String, u64)>, String> {
    static TARGET: OnceLock<Result<Option<(String, u64)>, String>> = OnceLock::new();
    TARGET.get_or_init(|| match std::env::var(VARIABLE) {
        Ok(value) => parse(&value).map(Some),
        Err(_) => Ok(None),
    })
}

/// `<point>:<n>` with a known point and n ≥ 1.
fn parse(value: &str) -> Result<(String, u64), String> {
    let names: Vec<&str> = POINTS.iter().map(|(name, _)| *name).collect();
    let bad = |why: &str| {
        format!(
            "{VARIABLE}={value:?}: {why}; write <point>:<n> with n from 1 and a point among {}",
            names.join(", ")
        )
    };
    let (point, n) = value.rsplit_once(':').ok_or_else(|| bad("no `:<n>`"))?;
    if !names.contains(&point) {
        return Err(bad("no such point"));
    }
    match n.parse::<u64>() {
        Ok(n) if n >= 1 => Ok((point.to_owned(), n)),
        _ => Err(bad("the pass is not a whole number from 1")),
    }
}

/// Checks the variable, so that a misspelt point is an error before a run starts instead of
/// a crash that never comes.
pub fn check() -> Result<(), String> {
    target().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// Passes the point `name`: aborts the process if this is the pass the variable names.
pub fn point(name: &str) {
    static PASSES: AtomicU64 = AtomicU64::new(0);
    let Ok(Some((point, n))) = target() else {
        return;
    };
    if point == name && PASSES.fetch_add(1, Ordering::SeqCst) + 1 == *n && is_chosen_rank() {
        eprintln!("strata: {VARIABLE}: aborting at pass {n} of {name}");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn points_and_passes_are_checked() {
        assert_eq!(parse("after-step:3"), Ok(("after-step".to_owned(), 3)));
        let unknown = parse("after-stop:3").unwrap_err();
        assert!(unknown.contains("no such point") && unknown.contains("epoch-end"));
        assert!(parse("after-step:0").unwrap_err().contains("from 1"));
        assert!(parse("after-step").unwrap_err().contains(":<n>"));
    }
}
