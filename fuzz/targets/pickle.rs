//! Fuzzes the snapshot pickle reader (PyTorch's `_dump_snapshot` format and strata's).

use strata_alloc::Snapshot;

fn main() {
    afl::fuzz!(|data: &[u8]| {
        let _ = Snapshot::from_pickle(data);
    });
}
