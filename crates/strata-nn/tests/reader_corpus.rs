//! The safetensors reader on every file of its corpus (`tests/corpus/safetensors/`, made by
//! `scripts/make-reader-corpus.py`): valid files read, damaged and hostile ones are clear
//! errors; none panics or asks for a large allocation.

use strata_corpus as harness;

#[global_allocator]
static ALLOCATOR: harness::Counting = harness::Counting;

use strata_nn::state::StateDict;

#[test]
fn every_safetensors_file_reads_or_is_refused_clearly() {
    // Memory-mapped, as `StateDict::load` reads files.
    harness::check("safetensors", 35, |p| StateDict::load(p));
    // From bytes, as a checkpoint's payload is read.
    harness::check("safetensors", 35, |p| {
        let bytes = std::fs::read(p).map_err(|e| e.to_string())?;
        StateDict::from_bytes(&bytes, p).map_err(|e| e.to_string())
    });
}
