//! The idx reader on every file of its corpus (`tests/corpus/idx/`, made by
//! `scripts/make-reader-corpus.py`): valid files read, damaged and hostile ones are clear
//! errors; none panics or asks for a large allocation.

use strata_corpus as harness;

#[global_allocator]
static ALLOCATOR: harness::Counting = harness::Counting;

use strata_data::idx;

#[test]
fn every_idx_file_reads_or_is_refused_clearly() {
    harness::check("idx", 40, idx::read);
}
