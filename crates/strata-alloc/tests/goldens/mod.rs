//! PyTorch's CUDA goldens (`fixtures/pytorch-cuda/`, see its README), as the tests that read
//! them load them.

use std::path::PathBuf;

use serde_json::Value;
use strata_alloc::Snapshot;

/// The harvested programs.
pub const PROGRAMS: [&str; 6] = ["mixed", "frag", "streams", "mlp", "gpt", "oom"];
/// Each ran with PyTorch's defaults and with `expandable_segments:True`.
pub const SETTINGS: [&str; 2] = ["default", "expandable"];

/// The goldens' folder: `STRATA_ALLOC_FIXTURES/pytorch-cuda` where the GPU runner names the
/// fixtures of the tree it was carried with, else this crate's.
pub fn fixtures() -> PathBuf {
    std::env::var_os("STRATA_ALLOC_FIXTURES")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures"))
        .join("pytorch-cuda")
}

/// The golden of `program` under `setting`: its snapshot (every trace action known to the
/// reader) and its JSON of figures.
pub fn golden(program: &str, setting: &str) -> (Snapshot, Value) {
    let pickle = fixtures().join(format!("{program}.{setting}.pickle"));
    let json = fixtures().join(format!("{program}.{setting}.json"));
    let (snapshot, notes) =
        Snapshot::load_with_notes(&pickle).unwrap_or_else(|e| panic!("{}: {e}", pickle.display()));
    assert!(
        notes.skipped_actions.is_empty(),
        "{program}.{setting}: actions strata does not know: {:?}",
        notes.skipped_actions
    );
    let text = std::fs::read_to_string(&json).unwrap_or_else(|e| panic!("{}: {e}", json.display()));
    let figures = serde_json::from_str(&text).expect("a golden's JSON parses");
    (snapshot, figures)
}

/// `memory_stats()[key]` as PyTorch reported it.
pub fn stat(figures: &Value, key: &str) -> u64 {
    figures["memory_stats"][key]
        .as_u64()
        .unwrap_or_else(|| panic!("memory_stats has no {key}"))
}
