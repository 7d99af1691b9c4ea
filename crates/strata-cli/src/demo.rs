//! The demo `strata` runs by default: views sharing storage, the version counter, and memory
//! returned the moment the last handle drops — printed for a person to read.

use std::io::Write;
use std::sync::Arc;

use strata::prelude::*;
use strata_alloc::{DeviceAllocator, HostBacking, HostCachingAllocator};

fn kib(bytes: usize) -> String {
    if bytes < 1024 {
        format!("{bytes} bytes")
    } else {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    }
}

/// Writes the demo to `out`.
pub fn run(out: &mut impl Write) -> strata::Result<()> {
    // The demo uses its own caching allocator so the byte counts below are exactly its own.
    let cache = Arc::new(HostCachingAllocator::new(HostBacking::new()));
    let host: Arc<dyn DeviceAllocator> = cache.clone();
    with_allocator(&host, || -> strata::Result<()> {
        writeln!(out, "strata demo: views, versions and memory\n")?;

        let x = Tensor::arange(12, DType::F32)?.view(&[3, 4])?;
        writeln!(out, "x = arange(12).view(3, 4)")?;
        writeln!(out, "{x}")?;
        writeln!(
            out,
            "  shape {:?}, strides {:?}, {} allocated\n",
            x.shape(),
            x.stride(),
            kib(host.memory_allocated())
        )?;

        let col = x.select(1, 2)?;
        let xt = x.t()?;
        writeln!(out, "col = x.select(1, 2)   -> {col}")?;
        writeln!(
            out,
            "xt  = x.t()            -> shape {:?}, strides {:?}, contiguous: {}",
            xt.shape(),
            xt.stride(),
            xt.is_contiguous()
        )?;
        writeln!(
            out,
            "  all three share one storage: {}; still {} allocated (views copy nothing)\n",
            col.shares_storage(&x) && xt.shares_storage(&x),
            kib(host.memory_allocated())
        )?;

        col.mul_(100.0)?;
        writeln!(out, "col.mul_(100) writes through the view:")?;
        writeln!(out, "{x}")?;
        writeln!(
            out,
            "  version counter, shared by every view: x {} / col {} / xt {}\n",
            x.version(),
            col.version(),
            xt.version()
        )?;

        match xt.view(&[12]) {
            Ok(_) => writeln!(out, "xt.view(12) unexpectedly worked")?,
            Err(e) => writeln!(out, "xt.view(12) is refused:\n  {e}\n")?,
        }
        let flat = xt.reshape(&[12])?;
        writeln!(
            out,
            "xt.reshape(12) copies instead: shares storage with x: {}; {} allocated\n",
            flat.shares_storage(&x),
            kib(host.memory_allocated())
        )?;

        drop(flat);
        writeln!(
            out,
            "drop(flat)            -> {} allocated (the copy is returned at once)",
            kib(host.memory_allocated())
        )?;
        drop(x);
        writeln!(
            out,
            "drop(x)               -> {} allocated (col and xt still hold the storage)",
            kib(host.memory_allocated())
        )?;
        drop(col);
        drop(xt);
        writeln!(
            out,
            "drop(col), drop(xt)   -> {} allocated (last handle gone, memory returned)",
            kib(host.memory_allocated())
        )?;
        writeln!(
            out,
            "peak during the demo: {}\n",
            kib(host.max_memory_allocated())
        )?;
        writeln!(
            out,
            "The freed blocks stay cached for the next tensor: {} reserved, {} allocated.",
            kib(cache.memory_reserved()),
            kib(host.memory_allocated())
        )?;
        writeln!(out, "memory_summary():")?;
        write!(out, "{}", cache.memory_summary(true))?;
        cache.empty_cache()?;
        writeln!(
            out,
            "\nempty_cache() returns them to the system: {} reserved.",
            kib(cache.memory_reserved())
        )?;
        Ok(())
    })
}
