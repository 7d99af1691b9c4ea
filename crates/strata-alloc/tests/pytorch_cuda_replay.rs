//! Replaying PyTorch's own CUDA runs (`fixtures/pytorch-cuda/`) through strata's caching
//! allocator over the virtual backing, under each run's recorded settings and memory limit:
//! the replay reaches PyTorch's peaks, segment count, retries and out-of-memory errors to the
//! byte, at the end of every phase of each program as well as at its end.
//!
//! Two things make the replay PyTorch's run rather than one like it: the virtual backing hands
//! out the run's own segment addresses and the allocator then breaks ties between equal free
//! blocks by address, as PyTorch does (strata's own runs prefer the oldest segment; CUDA gives
//! newer segments lower addresses, so the two orders differ); and a free that the run
//! completed late, because another stream still used the block, is completed late in the
//! replay too.

mod goldens;

use goldens::{golden, stat, PROGRAMS, SETTINGS};
use strata_alloc::caching::{MemoryStats, TraceAction};
use strata_alloc::offline::{replay_recorded, replay_with, ReplayOptions};

/// `(allocated, allocated peak, reserved, reserved peak)`.
type State = [u64; 4];

fn state(m: &MemoryStats) -> State {
    [
        m.allocated_bytes.all.current,
        m.allocated_bytes.all.peak,
        m.reserved_bytes.all.current,
        m.reserved_bytes.all.peak,
    ]
    .map(|v| v.max(0) as u64)
}

#[test]
fn replaying_pytorchs_runs_reproduces_its_figures_to_the_byte() {
    for program in PROGRAMS {
        for setting in SETTINGS {
            let name = format!("{program}.{setting}");
            let (snapshot, figures) = golden(program, setting);
            // PyTorch's snapshots do not record `set_per_process_memory_fraction`; the JSON does.
            let limit = figures["limit_bytes"].as_u64();
            let mut states: Vec<State> = Vec::new();
            let r = replay_recorded(&snapshot, 0, limit, &mut |_, m| states.push(state(m)))
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(
                r.peak_allocated,
                stat(&figures, "allocated_bytes.all.peak"),
                "{name}: allocated peak"
            );
            assert_eq!(
                r.peak_reserved,
                stat(&figures, "reserved_bytes.all.peak"),
                "{name}: reserved peak"
            );
            assert_eq!(
                r.peak_segments,
                stat(&figures, "segment.all.peak"),
                "{name}: segment peak"
            );
            assert_eq!(
                r.alloc_retries,
                stat(&figures, "num_alloc_retries"),
                "{name}: retries"
            );
            assert_eq!(
                r.ooms.len() as u64,
                stat(&figures, "num_ooms"),
                "{name}: out-of-memory errors"
            );
            // The replay runs out of memory exactly where the run did.
            let trace = &snapshot.device_traces[0];
            let recorded_ooms: Vec<usize> = (0..trace.len())
                .filter(|&i| trace[i].action == TraceAction::Oom)
                .collect();
            let replayed_ooms: Vec<usize> = r.ooms.iter().map(|o| o.entry).collect();
            assert_eq!(replayed_ooms, recorded_ooms, "{name}: where memory ran out");

            // Each phase's figures, in order: the replay passes through the state PyTorch
            // reported at the end of every phase, each after the one before.
            let mut from = 0;
            for phase in figures["phases"].as_array().expect("phases") {
                let field = |k: &str| phase[k].as_u64().expect("a phase figure");
                let want = [
                    field("allocated"),
                    field("allocated_peak"),
                    field("reserved"),
                    field("reserved_peak"),
                ];
                let at = states[from..]
                    .iter()
                    .position(|s| *s == want)
                    .unwrap_or_else(|| {
                        panic!(
                            "{name}: phase {} ({want:?}) is never reached after entry {from}",
                            phase["phase"]
                        )
                    });
                from += at + 1;
            }
            // And the end: what PyTorch reported when the program finished.
            assert_eq!(
                states.last().map(|s| [s[0], s[2]]),
                Some([
                    stat(&figures, "allocated_bytes.all.current"),
                    stat(&figures, "reserved_bytes.all.current")
                ]),
                "{name}: at the end"
            );
        }
    }
}

#[test]
fn the_what_if_replay_agrees_with_pytorchs_run_under_the_other_setting() {
    // The fragmenting run that ran out of memory under 1 GiB with default settings, replayed
    // with expandable segments on the same limit: at the request that failed, it would not have
    // failed. PyTorch's own run with expandable segments agrees: it got past that point, to
    // more allocated memory than the default run ever held, before it too ran out.
    let (snapshot, figures) = golden("oom", "default");
    let limit = figures["limit_bytes"].as_u64().expect("a limit");
    let options = ReplayOptions {
        limit: Some(limit),
        ..ReplayOptions::new(0, "expandable_segments:True")
    };
    let r = replay_with(&snapshot, &options).expect("a replay");
    assert_eq!(r.traced_ooms, 1);
    assert_eq!(
        r.recorded.ooms.len(),
        1,
        "the recorded settings fail where PyTorch did"
    );
    assert_eq!(r.what_if.capacity, Some(limit));
    assert!(r.what_if.ooms.is_empty(), "{:?}", r.what_if.ooms);
    assert!(r.what_if.peak_reserved <= limit);
    let (_, expandable) = golden("oom", "expandable");
    assert!(
        stat(&expandable, "allocated_bytes.all.peak") > stat(&figures, "allocated_bytes.all.peak")
    );
}
