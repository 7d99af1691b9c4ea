//! The checkpoint reader and the conformance runner's document reader on every file of
//! their corpora (`tests/corpus/checkpoint/` and `tests/corpus/conformance/`, made by
//! `scripts/make-reader-corpus.py`): valid files read, damaged and hostile ones are clear
//! errors; none panics or asks for a large allocation.

use strata_corpus as harness;

#[global_allocator]
static ALLOCATOR: harness::Counting = harness::Counting;

use strata_cli::train::checkpoint_summary;

#[test]
fn every_checkpoint_reads_or_is_refused_clearly() {
    harness::check("checkpoint", 30, checkpoint_summary);
}

#[test]
fn every_conformance_document_runs_or_is_refused_clearly() {
    harness::check("conformance", 25, |p| {
        let bytes = std::fs::read(p).map_err(|e| e.to_string())?;
        let text = String::from_utf8(bytes).map_err(|e| format!("not UTF-8: {e}"))?;
        strata_cli::conform::run_document(&text).map_err(|e| e.to_string())
    });
}
