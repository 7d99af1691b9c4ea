//! The snapshot reader on every file of its corpus (`tests/corpus/snapshot/`, made by
//! `scripts/make-reader-corpus.py`): valid files read, damaged and hostile ones are clear
//! errors; none panics or asks for a large allocation.

use strata_corpus as harness;

#[global_allocator]
static ALLOCATOR: harness::Counting = harness::Counting;

use strata_alloc::Snapshot;

#[test]
fn every_snapshot_pickle_reads_or_is_refused_clearly() {
    harness::check("snapshot", 40, |p| Snapshot::load(p));
}
