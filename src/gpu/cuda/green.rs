//! SM partitions made from CUDA green contexts: the realisable-size rule, the split of the
//! device's SM resource, and [`GreenContext`], which owns a green context and its stream and
//! destroys both on drop.
//!
//! A partition of m SMs is `cuDevSmResourceSplitByCount(minCount = m)` → one group of at least m
//! SMs plus the remainder; each becomes a green context with its own non-blocking stream. The
//! whole device is the unsplit resource. The driver rounds a request up to its granularity, so the
//! count it grants is read back and recorded, never assumed.

use cudarc::driver::sys::{self, CUdevResource, CUdevResourceType};

use super::driver::check;
use super::raw;
use crate::gpu::GpuError;

/// (smallest group, step) that `cuDevSmResourceSplitByCount` grants on an architecture, from the
/// CUDA 12.4 driver API documentation: 9.0 and later (Hopper, Blackwell) 8 and 8; 8.x 4 and 2;
/// 7.x 2 and 2; 6.x 1 and 1. Green contexts do not exist before 6.0.
pub fn split_granularity(cc_major: u32) -> (u32, u32) {
    match cc_major {
        9.. => (8, 8),
        8 => (4, 2),
        7 => (2, 2),
        _ => (1, 1),
    }
}

/// The driver version (`cuDriverGetVersion`) that `cuGreenCtxStreamCreate` first shipped in.
/// Green contexts themselves are 12.4, but a partition without its own stream cannot be timed.
pub const GREEN_STREAMS_DRIVER: u32 = 12050;

/// Refuse a driver too old for partitions, with what to install.
pub fn check_driver(version: u32) -> Result<(), GpuError> {
    if version >= GREEN_STREAMS_DRIVER {
        return Ok(());
    }
    Err(GpuError::Driver {
        call: "cuDriverGetVersion",
        detail: format!(
            "the driver supports CUDA {}.{}; SM partitions need green-context streams, CUDA 12.5 \
             (driver 555) or newer",
            version / 1000,
            (version % 1000) / 10
        ),
    })
}

/// The sizes to ask the split API for: the granularity's multiples up to the device, then the
/// whole device. On Hopper these are the realisable sizes (8, 16, ..., 128, 132 on an H100/H200);
/// elsewhere [`super::CudaGpu::open`] keeps what the API actually grants for each request.
pub fn candidate_sizes(cc_major: u32, total_sms: u32) -> Vec<u32> {
    let (min, step) = split_granularity(cc_major);
    let mut sizes: Vec<u32> = (0..)
        .map(|k| min + k * step)
        .take_while(|&m| m <= total_sms)
        .collect();
    if sizes.last() != Some(&total_sms) && total_sms > 0 {
        sizes.push(total_sms);
    }
    sizes
}

/// Sorted, deduplicated, ascending; the whole device is always last.
pub fn normalise_sizes(mut granted: Vec<u32>, total_sms: u32) -> Vec<u32> {
    granted.retain(|&m| m > 0 && m <= total_sms);
    granted.push(total_sms);
    granted.sort_unstable();
    granted.dedup();
    granted
}

pub fn sm_count(res: &CUdevResource) -> u32 {
    // SAFETY: the resource is of type SM (every resource here comes from an SM query or split),
    // so `sm` is the active union member.
    unsafe { res.__bindgen_anon_1.sm.smCount }
}

/// The device's whole SM resource.
pub fn device_sms(dev: sys::CUdevice) -> Result<CUdevResource, GpuError> {
    // SAFETY: CUdevResource is plain old data; all-zero is a valid "empty" value.
    let mut res: CUdevResource = unsafe { std::mem::zeroed() };
    let kind = CUdevResourceType::CU_DEV_RESOURCE_TYPE_SM;
    // SAFETY: out-pointer to a local resource; `dev` is a valid device ordinal handle.
    check("cuDeviceGetDevResource", || unsafe {
        raw::cuDeviceGetDevResource(dev, &mut res, kind)
    })?;
    Ok(res)
}

/// Split `whole` into one group of at least `sms` SMs and the remainder.
pub fn split(whole: &CUdevResource, sms: u32) -> Result<(CUdevResource, CUdevResource), GpuError> {
    // SAFETY: as above, zeroed resources are valid out-values.
    let (mut group, mut rest): (CUdevResource, CUdevResource) =
        unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    let mut groups = 1u32;
    // SAFETY: room for exactly `groups` = 1 result; input and remainder point to live locals.
    check("cuDevSmResourceSplitByCount", || unsafe {
        raw::cuDevSmResourceSplitByCount(&mut group, &mut groups, whole, &mut rest, 0, sms)
    })?;
    if groups != 1 {
        return Err(GpuError::Driver {
            call: "cuDevSmResourceSplitByCount",
            detail: format!("asked for one group of {sms} SMs, got {groups} groups"),
        });
    }
    Ok((group, rest))
}

/// How many SMs a split for `sms` would grant, without creating a context.
pub fn granted(whole: &CUdevResource, sms: u32) -> Result<u32, GpuError> {
    split(whole, sms).map(|(group, _)| sm_count(&group))
}

/// A green context over a set of SMs, the context handle it converts to, and one stream on it.
pub struct GreenContext {
    green: sys::CUgreenCtx,
    pub ctx: sys::CUcontext,
    pub stream: sys::CUstream,
    pub sms: u32,
}

impl GreenContext {
    pub fn create(dev: sys::CUdevice, resource: &CUdevResource) -> Result<Self, GpuError> {
        let mut res = *resource;
        let mut desc = std::ptr::null_mut();
        // SAFETY: one live resource in, descriptor out.
        check("cuDevResourceGenerateDesc", || unsafe {
            raw::cuDevResourceGenerateDesc(&mut desc, &mut res, 1)
        })?;
        let mut green = std::ptr::null_mut();
        let flags = sys::CUgreenCtxCreate_flags::CU_GREEN_CTX_DEFAULT_STREAM as u32;
        // SAFETY: `desc` was generated above for this device; the driver requires the
        // default-stream flag.
        check("cuGreenCtxCreate", || unsafe {
            raw::cuGreenCtxCreate(&mut green, desc, dev, flags)
        })?;
        let mut this = GreenContext {
            green,
            ctx: std::ptr::null_mut(),
            stream: std::ptr::null_mut(),
            sms: sm_count(resource),
        };
        let ctx = &mut this.ctx;
        // SAFETY: `green` is live; the context handle stays valid as long as the green context.
        check("cuCtxFromGreenCtx", || unsafe {
            raw::cuCtxFromGreenCtx(ctx, green)
        })?;
        let stream = &mut this.stream;
        let non_blocking = sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32;
        // SAFETY: green-context streams must be non-blocking; priority 0 is the default.
        check("cuGreenCtxStreamCreate", || unsafe {
            raw::cuGreenCtxStreamCreate(stream, green, non_blocking, 0)
        })?;
        Ok(this)
    }
}

impl Drop for GreenContext {
    fn drop(&mut self) {
        if !self.stream.is_null() {
            let stream = self.stream;
            // SAFETY: created by cuGreenCtxStreamCreate, destroyed once, before its context.
            let _ = check("cuStreamDestroy", || unsafe {
                raw::cuStreamDestroy_v2(stream)
            });
        }
        let green = self.green;
        // SAFETY: created by cuGreenCtxCreate, destroyed once; nothing of it is used afterwards.
        let _ = check("cuGreenCtxDestroy", || unsafe {
            raw::cuGreenCtxDestroy(green)
        });
    }
}

/// The measured partition and, when there is one, the complementary SMs for the stressor.
pub struct Partition {
    pub main: GreenContext,
    pub rest: Option<GreenContext>,
}

impl Partition {
    pub fn create(dev: sys::CUdevice, sms: u32, total_sms: u32) -> Result<Self, GpuError> {
        let whole = device_sms(dev)?;
        if sms >= total_sms {
            return Ok(Partition {
                main: GreenContext::create(dev, &whole)?,
                rest: None,
            });
        }
        let (group, rest) = split(&whole, sms)?;
        let rest = if sm_count(&rest) > 0 {
            Some(GreenContext::create(dev, &rest)?)
        } else {
            None
        };
        Ok(Partition {
            main: GreenContext::create(dev, &group)?,
            rest,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hopper_sizes_are_multiples_of_eight_plus_the_whole_device() {
        let sizes = candidate_sizes(9, 132);
        assert_eq!(sizes.len(), 17);
        assert_eq!(sizes[..3], [8, 16, 24]);
        assert_eq!(sizes[15..], [128, 132]);
        assert_eq!(
            candidate_sizes(9, 128).last(),
            Some(&128),
            "no duplicate whole device"
        );
    }

    #[test]
    fn other_architectures_follow_their_split_granularity() {
        assert_eq!(candidate_sizes(8, 10), vec![4, 6, 8, 10]);
        assert_eq!(candidate_sizes(8, 11), vec![4, 6, 8, 10, 11]);
        assert_eq!(candidate_sizes(7, 5), vec![2, 4, 5]);
        assert_eq!(
            candidate_sizes(6, 3),
            vec![1, 2, 3],
            "6.x splits by single SMs"
        );
        assert_eq!(candidate_sizes(10, 148).len(), 19);
        assert_eq!(
            candidate_sizes(9, 4),
            vec![4],
            "a device below the minimum is one partition"
        );
    }

    #[test]
    fn drivers_without_green_context_streams_are_refused_with_the_version_needed() {
        assert!(check_driver(12050).is_ok());
        assert!(check_driver(13000).is_ok());
        let err = check_driver(12040).unwrap_err().to_string();
        assert!(err.contains("CUDA 12.4"), "{err}");
        assert!(err.contains("CUDA 12.5"), "{err}");
    }

    #[test]
    fn granted_sizes_are_normalised() {
        assert_eq!(
            normalise_sizes(vec![16, 8, 8, 0, 200], 132),
            vec![8, 16, 132]
        );
    }
}
