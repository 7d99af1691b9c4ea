//! The checkpoint reader on every file of its corpus (`tests/corpus/checkpoint/`, made by
//! `scripts/make-reader-corpus.py`): valid files read, damaged and hostile ones are clear
//! errors; none panics or asks for a large allocation.

#[path = "../../../tests/corpus/harness.rs"]
mod harness;

#[global_allocator]
static ALLOCATOR: harness::Counting = harness::Counting;

use strata_cli::train::checkpoint_summary;

#[test]
fn every_checkpoint_reads_or_is_refused_clearly() {
    harness::check("checkpoint", 30, checkpoint_summary);
}
