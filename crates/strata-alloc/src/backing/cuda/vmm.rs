//! Expandable segments on a CUDA device: address space reserved once
//! (`cuMemAddressReserve`), physical memory created in pages of the device's allocation
//! granularity (`cuMemCreate`), mapped into it (`cuMemMap`) and made accessible
//! (`cuMemSetAccess`); unmapping releases the pages (`cuMemUnmap`, `cuMemRelease`) and the
//! address space goes back last (`cuMemAddressFree`).
//!
//! One physical allocation per granularity page, as PyTorch keeps one per segment page, so
//! any page-aligned range the allocator mapped can be unmapped on its own.

use std::collections::BTreeMap;
use std::sync::Mutex;

use cudarc::driver::sys;

use super::driver::{check, Context, CudaError};

/// The physical pages mapped on one device.
#[derive(Debug)]
pub(crate) struct Vmm {
    ctx: Context,
    /// Bytes per page, the device's minimum allocation granularity; `None` where the device
    /// does not support the virtual-memory API (some virtualised GPUs): there expandable
    /// segments are refused and ordinary ones still work.
    granularity: Option<usize>,
    /// Mapped pages: address to physical allocation handle.
    pages: Mutex<BTreeMap<usize, sys::CUmemGenericAllocationHandle>>,
}

impl Vmm {
    /// The virtual-memory wrapper of `ctx`'s device.
    pub fn new(ctx: Context) -> Result<Vmm, CudaError> {
        ctx.bind()?;
        let mut supported = 0;
        check(
            // SAFETY: the context is current; `supported` is a valid out-pointer.
            unsafe {
                sys::cuDeviceGetAttribute(
                    &mut supported,
                    sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                    ctx.device,
                )
            },
            "cuDeviceGetAttribute",
        )?;
        if supported == 0 {
            return Ok(Vmm {
                ctx,
                granularity: None,
                pages: Mutex::new(BTreeMap::new()),
            });
        }
        let prop = Self::prop(ctx.device);
        let mut granularity = 0usize;
        check(
            // SAFETY: the context is current; `prop` describes pinned memory on this device and
            // `granularity` is a valid out-pointer.
            unsafe {
                sys::cuMemGetAllocationGranularity(
                    &mut granularity,
                    &prop,
                    sys::CUmemAllocationGranularity_flags::CU_MEM_ALLOC_GRANULARITY_MINIMUM,
                )
            },
            "cuMemGetAllocationGranularity",
        )?;
        Ok(Vmm {
            ctx,
            granularity: Some(granularity.max(1)),
            pages: Mutex::new(BTreeMap::new()),
        })
    }

    /// Pinned device memory on `device`, no shareable handle.
    fn prop(device: sys::CUdevice) -> sys::CUmemAllocationProp {
        // SAFETY: a plain C struct for which all-zero bytes are a valid value (zero handle
        // types, no flags); the fields that matter are set below.
        let mut prop: sys::CUmemAllocationProp = unsafe { std::mem::zeroed() };
        prop.type_ = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
        prop.location.type_ = sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE;
        prop.location.id = device;
        prop
    }

    /// The device's allocation granularity, or the error saying the device has no
    /// virtual-memory API.
    pub fn granularity(&self) -> Result<usize, CudaError> {
        self.granularity.ok_or_else(|| {
            CudaError::refused(
                "cuMemAddressReserve",
                sys::CUresult::CUDA_ERROR_NOT_SUPPORTED,
                "this device does not support virtual memory management, so expandable \
                 segments are unavailable: unset expandable_segments",
            )
        })
    }

    /// The granularity, once `[addr, addr + size)` is checked to be a whole number of pages.
    fn aligned(&self, addr: usize, size: usize, what: &str) -> Result<usize, CudaError> {
        let g = self.granularity()?;
        if addr.is_multiple_of(g) && size.is_multiple_of(g) && size > 0 {
            return Ok(g);
        }
        Err(CudaError::refused(
            "cuMemMap",
            sys::CUresult::CUDA_ERROR_INVALID_VALUE,
            format!(
                "{what} of {size} bytes at {addr:#x} is not a multiple of the device's {g} \
                 byte allocation granularity"
            ),
        ))
    }

    /// Reserves `size` bytes of device address space (a multiple of the granularity).
    pub fn reserve(&self, size: usize) -> Result<usize, CudaError> {
        let granularity = self.aligned(0, size, "a reservation")?;
        self.ctx.bind()?;
        let mut ptr: sys::CUdeviceptr = 0;
        check(
            // SAFETY: the context is current; `ptr` is a valid out-pointer; no fixed address;
            // aligned to the granularity, as mappings must be.
            unsafe { sys::cuMemAddressReserve(&mut ptr, size, granularity, 0, 0) },
            "cuMemAddressReserve",
        )?;
        Ok(ptr as usize)
    }

    /// Backs `[addr, addr + size)`, inside a reservation and not mapped, with fresh pages.
    /// On failure nothing stays mapped.
    pub fn map(&self, addr: usize, size: usize) -> Result<(), CudaError> {
        let granularity = self.aligned(addr, size, "a mapping")?;
        self.ctx.bind()?;
        let prop = Self::prop(self.ctx.device);
        let mut done: Vec<(usize, sys::CUmemGenericAllocationHandle)> = Vec::new();
        let mut result = Ok(());
        for page in (addr..addr + size).step_by(granularity) {
            let mut handle: sys::CUmemGenericAllocationHandle = 0;
            let created = check(
                // SAFETY: the context is current; `prop` is valid; `handle` is an out-pointer.
                unsafe { sys::cuMemCreate(&mut handle, granularity, &prop, 0) },
                "cuMemCreate",
            );
            if let Err(e) = created {
                result = Err(e);
                break;
            }
            let mapped = check(
                // SAFETY: `page` lies in a reservation of this context and is not mapped (the
                // caller's contract); `handle` is a fresh allocation of exactly this size.
                unsafe { sys::cuMemMap(page as sys::CUdeviceptr, granularity, 0, handle, 0) },
                "cuMemMap",
            );
            if let Err(e) = mapped {
                // SAFETY: the handle was created above and is mapped nowhere.
                unsafe { sys::cuMemRelease(handle) };
                result = Err(e);
                break;
            }
            done.push((page, handle));
        }
        if result.is_ok() {
            let access = sys::CUmemAccessDesc {
                location: prop.location,
                flags: sys::CUmemAccess_flags::CU_MEM_ACCESS_FLAGS_PROT_READWRITE,
            };
            // SAFETY: the whole range was just mapped in this context.
            result = check(
                unsafe { sys::cuMemSetAccess(addr as sys::CUdeviceptr, size, &access, 1) },
                "cuMemSetAccess",
            );
        }
        if let Err(e) = result {
            for (page, handle) in done {
                // SAFETY: each page was mapped above with this handle; nothing uses it yet.
                unsafe {
                    sys::cuMemUnmap(page as sys::CUdeviceptr, granularity);
                    sys::cuMemRelease(handle);
                }
            }
            return Err(e);
        }
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        pages.extend(done);
        Ok(())
    }

    /// Unmaps `[addr, addr + size)`, every page of which was mapped by [`Vmm::map`], and
    /// releases its pages.
    ///
    /// # Safety
    /// No pointer into the range may be used afterwards, and no queued work may still use it.
    pub unsafe fn unmap(&self, addr: usize, size: usize) -> Result<(), CudaError> {
        let granularity = self.aligned(addr, size, "an unmapping")?;
        self.ctx.bind()?;
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        let keys: Vec<usize> = pages.range(addr..addr + size).map(|(&a, _)| a).collect();
        if keys.len() != size / granularity {
            return Err(CudaError::refused(
                "cuMemUnmap",
                sys::CUresult::CUDA_ERROR_INVALID_VALUE,
                format!("{size} bytes at {addr:#x} are not all mapped"),
            ));
        }
        // The pages stay recorded as mapped unless the driver unmapped them.
        check(
            // SAFETY: the range is mapped (checked above) and unused (the caller's contract).
            unsafe { sys::cuMemUnmap(addr as sys::CUdeviceptr, size) },
            "cuMemUnmap",
        )?;
        let mut first_error = Ok(());
        for h in keys.iter().filter_map(|k| pages.remove(k)) {
            // SAFETY: the handle's page was just unmapped; nothing else refers to it.
            let released = check(unsafe { sys::cuMemRelease(h) }, "cuMemRelease");
            if first_error.is_ok() {
                first_error = released;
            }
        }
        first_error
    }

    /// Gives back a reservation with nothing mapped in it.
    ///
    /// # Safety
    /// `addr` and `size` must come from one [`Vmm::reserve`], with nothing mapped in it.
    pub unsafe fn release(&self, addr: usize, size: usize) -> Result<(), CudaError> {
        self.ctx.bind()?;
        check(
            // SAFETY: the caller's contract.
            unsafe { sys::cuMemAddressFree(addr as sys::CUdeviceptr, size) },
            "cuMemAddressFree",
        )
    }
}
