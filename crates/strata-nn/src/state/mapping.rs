//! Reading a safetensors file through a private copy-on-write memory mapping: tensors whose
//! bytes are aligned borrow the mapping (no copy; writes go to private pages, never to the
//! file), the others are copied. The mapped bytes are counted in the host allocator's
//! `mapped_bytes` statistic until the last tensor borrowing them drops.
//!
//! With the conversion in `module/convert.rs`, this is the only `unsafe` code in strata-nn:
//! creating the mapping and the storages over it.

use std::fs::File;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::{MmapMut, MmapOptions};
use strata_alloc::{DeviceAllocator, MappedBytes};
use strata_core::routing::default_host_allocator;
use strata_core::storage::Storage;
use strata_core::{Device, Tensor};

use super::error::StateError;
use super::format::{self, check_bools, EntryInfo};

/// Owns a mapping for the storages that view it, and counts its bytes while it lives.
struct Mapping {
    _map: MmapMut,
    _counted: MappedBytes,
}

/// Alignment a borrowed tensor's first byte needs: `Storage::from_owner` asks for alignment
/// fit for any element type, and the widest strata element is 8 bytes.
const BORROW_ALIGN: usize = 8;

/// Whether an entry can borrow the mapping at `addr`: aligned, non-empty, and the host
/// reads the file's little-endian bytes as they are.
fn borrowable(e: &EntryInfo, addr: usize) -> bool {
    cfg!(target_endian = "little") && e.end > e.start && addr.is_multiple_of(BORROW_ALIGN)
}

/// Reads every tensor of the safetensors file at `path`, in the order of their bytes.
pub(crate) fn read(path: &Path) -> Result<(Vec<(String, Tensor)>, format::Metadata), StateError> {
    let file = File::open(path).map_err(|e| StateError::io(path, e))?;
    let len = file.metadata().map_err(|e| StateError::io(path, e))?.len();
    if len == 0 {
        return Err(StateError::format(path, "the file is empty"));
    }
    // SAFETY: a private (copy-on-write) mapping: writes through it never reach the file.
    // The remaining requirement, that no other process truncates or rewrites the file in
    // place while it is mapped, is the caller's, as documented on `StateDict::load`
    // (strata's own saves replace a file by renaming a new one over it, which leaves the
    // mapped old file intact).
    let mut map =
        unsafe { MmapOptions::new().map_copy(&file) }.map_err(|e| StateError::io(path, e))?;
    let allocator: Arc<dyn DeviceAllocator> = default_host_allocator()?.clone();
    let counted = MappedBytes::new(allocator, map.len());
    let header = format::parse(path, &map)?;

    let base = map.as_mut_ptr();
    let addr_of = |e: &EntryInfo| base.wrapping_add(header.data_start + e.start);
    // Checks and copies first, reading the mapping as bytes; no storage views it yet.
    let mut copies = Vec::with_capacity(header.entries.len());
    for e in &header.entries {
        let bytes = &map[header.data_start + e.start..header.data_start + e.end];
        if e.dtype == strata_core::DType::Bool {
            check_bools(path, &e.key, bytes)?;
        }
        copies.push(if borrowable(e, addr_of(e) as usize) {
            None
        } else {
            Some(format::decode(path, e, bytes)?)
        });
    }

    let owner = Arc::new(Mapping {
        _map: map,
        _counted: counted,
    });
    let mut out = Vec::with_capacity(header.entries.len());
    for (e, copy) in header.entries.iter().zip(copies) {
        let t = match copy {
            Some(t) => t,
            None => {
                let ptr = NonNull::new(addr_of(e)).ok_or_else(|| {
                    StateError::entry(path, &e.key, "the mapping gave a null address")
                })?;
                // SAFETY: `ptr` is the entry's first byte inside the mapping, 8-byte aligned
                // (`borrowable`), followed by the entry's `end - start` bytes, which the
                // header check proved lie inside the file and overlap no other entry's, so
                // no other storage views them. The mapping stays alive while any storage
                // holds `owner`, and nothing reads it as a slice any more.
                let storage = unsafe {
                    Storage::from_owner(ptr, e.end - e.start, Device::Cpu, Box::new(owner.clone()))
                };
                Tensor::from_storage(Arc::new(storage), &e.shape, e.dtype)?
            }
        };
        out.push((e.key.clone(), t));
    }
    Ok((out, header.metadata))
}
