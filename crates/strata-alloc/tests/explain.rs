//! `explain` on PyTorch-format snapshots (written by `scripts/make-explain-fixtures.py`), on
//! strata's own, and on PyTorch's CUDA goldens: the moment, its fragmentation, the holders by
//! the user's frame, and the fixes, each verified by replay.

mod goldens;

use std::path::PathBuf;

use strata_alloc::offline::{
    explain, Capacity, Change, ExplainOptions, Explanation, Moment, BEFORE_TRACE, NO_STACK,
};
use strata_alloc::{
    CachingAllocator, DeviceAllocator, RecordContext, Site, Snapshot, VirtualBacking,
};

const MIB: u64 = 1 << 20;

fn fixture(name: &str) -> Snapshot {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/explain")
        .join(name);
    Snapshot::load(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn fix<'e>(e: &'e Explanation, label: &str) -> &'e strata_alloc::offline::Fix {
    e.fixes
        .iter()
        .find(|f| f.change.label() == label)
        .unwrap_or_else(|| panic!("no fix {label} in {:#?}", e.fixes))
}

#[test]
fn a_fragmented_oom_is_fixed_by_expandable_segments_verified_by_replay() {
    let e = explain(
        &fixture("fragmented-oom.pickle"),
        &ExplainOptions::default(),
    );
    assert_eq!(
        e.moment,
        Moment::OutOfMemory {
            entry: 150,
            request: 64 * MIB,
            device_free: Some(40 * MIB),
            site: "/home/user/project/model.py:47 (forward)".into(),
        }
    );
    // PyTorch's snapshots do not record the device's size: free plus reserved estimates it.
    assert_eq!(e.capacity, Capacity::Estimated { bytes: 1000 * MIB });
    let f = &e.fragmentation;
    assert_eq!(
        (f.reserved, f.allocated, f.free_in_reserved),
        (960 * MIB, 600 * MIB, 360 * MIB)
    );
    assert_eq!(f.largest_free_block, 12 * MIB);
    assert_eq!(f.inactive_split_bytes, 360 * MIB);
    assert_eq!(f.pools.len(), 1);
    assert_eq!(f.pools[0].segments, 30);
    // The 32 MiB buffers were freed: only the activations hold memory, under the user's
    // frame, not PyTorch's.
    assert_eq!(e.holders.len(), 1);
    assert_eq!(
        e.holders[0].site,
        "/home/user/project/model.py:31 (forward)"
    );
    assert_eq!((e.holders[0].bytes, e.holders[0].blocks), (600 * MIB, 30));
    // The recorded settings run out where the run did; expandable segments and a small
    // max_split_size do not, larger ones do.
    let base = e.baseline().expect("a baseline");
    assert_eq!(base.first_oom.as_ref().map(|o| o.entry), Some(150));
    assert_eq!(
        e.suggested_settings(),
        ["expandable_segments:True", "max_split_size_mb:32"]
    );
    assert!(!fix(&e, "max_split_size_mb:128").helps);
    assert_eq!(fix(&e, "max_split_size_mb:128").ooms, 1);
    assert_eq!(fix(&e, "expandable_segments:True").ooms, 0);
    // The garbage collection threshold applies only under a known limit, which an estimate
    // is not.
    assert!(e
        .fixes
        .iter()
        .all(|f| !f.change.label().starts_with("garbage_collection")));
    assert!(
        e.verdict
            .contains("Fragmentation: 360.00 MiB free in reserved segments")
            && e.verdict
                .contains("largest free block 12.00 MiB for a 64.00 MiB request")
            && e.verdict
                .contains("expandable_segments:True or max_split_size_mb:32")
            && e.verdict.contains("verified by replay"),
        "{}",
        e.verdict
    );
}

#[test]
fn an_oom_only_less_memory_fixes_suggests_no_setting() {
    let e = explain(&fixture("full-oom.pickle"), &ExplainOptions::default());
    assert!(matches!(e.moment, Moment::OutOfMemory { entry: 96, .. }));
    assert_eq!(e.fragmentation.free_in_reserved, 0);
    assert!(e.suggested_settings().is_empty(), "{:#?}", e.fixes);
    let sites: Vec<(&str, u64)> = e
        .holders
        .iter()
        .map(|h| (h.site.as_str(), h.bytes))
        .collect();
    assert_eq!(
        sites,
        [
            ("/home/user/project/model.py:12 (__init__)", 600 * MIB),
            ("/home/user/project/model.py:31 (forward)", 360 * MIB),
        ]
    );
    let fewest = e
        .fewest_holders_removed()
        .expect("taking the weights away fits");
    assert_eq!(
        fewest.change,
        Change::WithoutHolders {
            count: 1,
            bytes: 600 * MIB
        }
    );
    assert!(
        e.verdict.contains("Not fragmentation")
            && e.verdict.contains("No allocator setting fits it")
            && e.verdict.contains("needs less memory"),
        "{}",
        e.verdict
    );
}

#[test]
fn library_frames_can_name_the_holders() {
    let options = ExplainOptions {
        library_frames: true,
        ..ExplainOptions::default()
    };
    let e = explain(&fixture("full-oom.pickle"), &options);
    assert_eq!(
        e.holders[0].site,
        "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/linear.py:106 \
         (reset_parameters)"
    );
}

#[test]
fn a_given_capacity_overrides_the_estimate() {
    // On a 2000 MiB device the same run does not run out of memory: nothing is verified.
    let options = ExplainOptions {
        capacity: Some(2000 * MIB),
        ..ExplainOptions::default()
    };
    let e = explain(&fixture("fragmented-oom.pickle"), &options);
    assert_eq!(e.capacity, Capacity::Given { bytes: 2000 * MIB });
    assert_eq!(e.baseline().map(|b| b.ooms), Some(0));
    assert!(e.fixes.iter().all(|f| !f.helps));
    assert!(e.verdict.contains("--capacity"), "{}", e.verdict);
}

/// strata's own run of the fragmenting pattern under a 1000 MiB limit, recorded.
fn strata_fragmented_run() -> Snapshot {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 34));
    a.set_memory_limit(Some(1000 << 20));
    a.record_memory_history(true, RecordContext::All, 100_000);
    let site = Site::unknown("buffers");
    let buffers: Vec<_> = (0..30)
        .map(|_| a.allocate(32 << 20, &site).unwrap())
        .collect();
    for b in buffers {
        // SAFETY: each block came from `a` and is not used again.
        unsafe { a.deallocate(b) };
    }
    let site = Site::unknown("activations");
    let held: Vec<_> = (0..30)
        .map(|_| a.allocate(20 << 20, &site).unwrap())
        .collect();
    assert!(a.allocate(64 << 20, &Site::unknown("request")).is_err());
    let snapshot = a.snapshot();
    for b in held {
        // SAFETY: as above.
        unsafe { a.deallocate(b) };
    }
    snapshot
}

#[test]
fn strata_snapshots_explain_under_their_recorded_limit() {
    let snapshot = strata_fragmented_run();
    let e = explain(&snapshot, &ExplainOptions::default());
    assert_eq!(e.capacity, Capacity::Recorded { bytes: 1000 * MIB });
    let Moment::OutOfMemory { request, site, .. } = &e.moment else {
        panic!("{:?}", e.moment)
    };
    assert_eq!(*request, 64 * MIB);
    assert!(site.contains("(request)"), "{site}");
    assert_eq!(e.fragmentation.free_in_reserved, 360 * MIB);
    assert_eq!(e.holders.len(), 1);
    assert!(e.holders[0].site.contains("(activations)"));
    assert_eq!(e.holders[0].categories.get("temporary"), Some(&(600 * MIB)));
    assert!(e.suggested_settings().contains(&"expandable_segments:True"));
    // Under a recorded limit the garbage collection threshold is tried too.
    assert!(e
        .fixes
        .iter()
        .any(|f| f.change.label() == "garbage_collection_threshold:0.6"));
    // The pickle says the same.
    let again = Snapshot::from_pickle(&snapshot.to_pickle()).unwrap();
    assert_eq!(explain(&again, &ExplainOptions::default()), e);
    let json = serde_json::to_value(&e).unwrap();
    assert_eq!(json["moment"]["kind"], "out_of_memory");
    assert_eq!(json["capacity"]["source"], "recorded");
    assert_eq!(json["verdict"], e.verdict.as_str());
}

#[test]
fn a_setting_already_on_is_never_suggested() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 34));
    a.set_allocator_settings("expandable_segments:True,max_split_size_mb:32")
        .unwrap();
    a.set_memory_limit(Some(100 << 20));
    a.record_memory_history(true, RecordContext::All, 10_000);
    let site = Site::unknown("weights");
    let held: Vec<_> = (0..4)
        .map(|_| a.allocate(20 << 20, &site).unwrap())
        .collect();
    assert!(a.allocate(40 << 20, &site).is_err());
    let e = explain(&a.snapshot(), &ExplainOptions::default());
    let tried: Vec<String> = e.fixes.iter().map(|f| f.change.label()).collect();
    assert!(!tried.iter().any(|t| t.starts_with("expandable_segments")));
    assert!(!tried.iter().any(|t| t == "max_split_size_mb:32"));
    assert!(e.suggested_settings().is_empty());
    for b in held {
        // SAFETY: each block came from `a` and is not used again.
        unsafe { a.deallocate(b) };
    }
}

#[test]
fn a_snapshot_without_a_trace_is_explained_from_its_segments() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 30));
    let b = a.allocate(3 << 20, &Site::unknown("weights")).unwrap();
    let e = explain(&a.snapshot(), &ExplainOptions::default());
    assert_eq!(e.moment, Moment::Snapshot);
    assert!(e.fixes.is_empty());
    assert_eq!(e.holders.len(), 1);
    assert_eq!(e.holders[0].bytes, 3 * MIB);
    assert!(e.verdict.contains("no trace"), "{}", e.verdict);
    // SAFETY: `b` came from `a` and is not used again.
    unsafe { a.deallocate(b) };
}

#[test]
fn blocks_from_before_the_trace_are_their_own_holder() {
    let a = CachingAllocator::new(VirtualBacking::new(1 << 34));
    let early = a.allocate(30 << 20, &Site::unknown("early")).unwrap();
    a.record_memory_history(true, RecordContext::All, 10_000);
    let late = a.allocate(10 << 20, &Site::unknown("late")).unwrap();
    let e = explain(&a.snapshot(), &ExplainOptions::default());
    assert!(matches!(e.moment, Moment::Peak { .. }));
    let sites: Vec<&str> = e.holders.iter().map(|h| h.site.as_str()).collect();
    assert_eq!(sites[0], BEFORE_TRACE);
    assert!(sites[1].contains("(late)"));
    // SAFETY: both came from `a` and are not used again.
    unsafe {
        a.deallocate(early);
        a.deallocate(late);
    }
}

#[test]
fn every_pytorch_golden_explains_and_its_moment_is_pytorchs() {
    for program in goldens::PROGRAMS {
        for setting in goldens::SETTINGS {
            let name = format!("{program}.{setting}");
            let (snapshot, figures) = goldens::golden(program, setting);
            let options = ExplainOptions {
                capacity: figures["limit_bytes"].as_u64(),
                ..ExplainOptions::default()
            };
            let e = explain(&snapshot, &options);
            assert!(!e.verdict.is_empty(), "{name}");
            match e.moment {
                Moment::OutOfMemory { .. } => {
                    // The state at the out-of-memory is PyTorch's, to the byte: the program
                    // recorded it right after catching the error.
                    let phase = &figures["phases"][0];
                    assert_eq!(phase["phase"], "oom", "{name}");
                    assert_eq!(
                        Some(e.fragmentation.allocated),
                        phase["allocated"].as_u64(),
                        "{name}"
                    );
                    assert_eq!(
                        Some(e.fragmentation.reserved),
                        phase["reserved"].as_u64(),
                        "{name}"
                    );
                    assert!(e.baseline().is_some_and(|b| b.ooms > 0), "{name}");
                }
                Moment::Peak { .. } => assert_eq!(
                    e.fragmentation.allocated,
                    goldens::stat(&figures, "allocated_bytes.all.peak"),
                    "{name}"
                ),
                Moment::Snapshot => panic!("{name}: the goldens have traces"),
            }
            if program == "mlp" {
                // Its stacks were kept: the holders are named by the harvesting script's
                // frames, none by PyTorch's.
                assert!(e.holders.iter().all(|h| !h.site.contains("/torch/")));
                assert!(e.holders.iter().any(|h| h.site != NO_STACK));
            }
        }
    }
}
