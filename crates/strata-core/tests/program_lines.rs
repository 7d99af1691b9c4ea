//! Ops inside ops name the program's line only while something listens (a `ProgramLines`
//! guard, as the memory watches hold, an observer, or history recorded with sites): otherwise an op records its own
//! caller and pays nothing for attribution. One test: the guard is process-wide.

use std::sync::Arc;

use strata_alloc::{AllocatorConfig, CachingAllocator, Grouping, RecordContext, VirtualBacking};
use strata_core::nn::functional::{cross_entropy, Reduction};
use strata_core::{memory, with_device_allocator, DType, Device, ProgramLines, Result, Tensor};

/// The sites of `caching`'s live blocks.
fn sites(caching: &CachingAllocator<VirtualBacking>) -> Vec<String> {
    caching
        .live_allocations_by(Grouping::Site)
        .into_iter()
        .map(|g| g.key)
        .collect()
}

#[test]
fn inner_ops_name_the_program_line_only_while_program_lines_are_recorded() -> Result<()> {
    let caching = Arc::new(CachingAllocator::with_config(
        VirtualBacking::new(1 << 30),
        AllocatorConfig::default(),
    ));
    let allocator: Arc<dyn strata_alloc::DeviceAllocator> = caching.clone();
    with_device_allocator(Device::Meta, &allocator, || -> Result<()> {
        let on = Tensor::on(Device::Meta);
        let logits = on.randn(&[64, 10], DType::F32)?;
        let y = on.zeros(&[64], DType::I64)?;

        // Nobody listens: the loss is attributed to the line inside `cross_entropy` that
        // made it.
        let loss = cross_entropy(&logits, &y, Reduction::None)?;
        let unobserved = sites(&caching);
        assert!(
            unobserved.iter().any(|s| s.contains("cross_entropy.rs")),
            "{unobserved:?}"
        );
        drop(loss);

        // With the guard held, every block names this file, the loss at its call.
        let lines = ProgramLines::record();
        let loss = cross_entropy(&logits, &y, Reduction::None)?;
        let here = format!("program_lines.rs:{}", line!() - 1);
        let recorded = sites(&caching);
        assert!(recorded.iter().any(|s| s.contains(&here)), "{recorded:?}");
        assert!(
            recorded.iter().all(|s| s.contains("program_lines.rs")),
            "{recorded:?}"
        );
        drop(loss);

        // Dropped, ops go back to their own callers.
        drop(lines);
        let loss = cross_entropy(&logits, &y, Reduction::None)?;
        let after = sites(&caching);
        assert!(
            after.iter().any(|s| s.contains("cross_entropy.rs")),
            "{after:?}"
        );
        drop(loss);

        // Recording history with sites attributes to the program's lines too, until it stops.
        memory::record_memory_history(true, RecordContext::All, 100, Device::Meta)?;
        let loss = cross_entropy(&logits, &y, Reduction::None)?;
        let recording = sites(&caching);
        memory::record_memory_history(false, RecordContext::All, 100, Device::Meta)?;
        assert!(
            recording.iter().all(|s| s.contains("program_lines.rs")),
            "{recording:?}"
        );
        drop(loss);
        let _loss = cross_entropy(&logits, &y, Reduction::None)?;
        let stopped = sites(&caching);
        assert!(
            stopped.iter().any(|s| s.contains("cross_entropy.rs")),
            "{stopped:?}"
        );
        Ok(())
    })
}
