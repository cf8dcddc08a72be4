//! Where a partition's blocks really run. The `%smid` probe is launched on a partition and on its
//! remainder at the same time; each block records the SM it ran on. A partition is proved when
//! its blocks covered exactly as many SMs as it was granted, the remainder's blocks as many as the
//! remainder holds, the two sets are disjoint and every block recorded where it ran.
//! Contended measurements rely on the last two: a stressor that could share SMs with the measured
//! partition would measure something else.
//!
//! Also here, because they are the same kind of launch: a short full-device load read by the clock
//! probe, and a kernel that traps, for testing fault recovery on hardware.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use super::driver::{
    launch, launch_timeout, occupancy, sync_stream, sync_stream_within, Current, DeviceBuffer,
    Param, Shape,
};
use super::green::GreenContext;
use super::suite::HostBuf;
use super::{library, nvrtc, partition, Session, SUPPORT, SUPPORT_SOURCE};
use crate::gpu::GpuError;
use cudarc::driver::sys;

/// How long each probe block spins, so that the block scheduler must spread blocks over every SM
/// of the partition instead of reusing a few fast ones.
const PROBE_SPIN_NS: u64 = 200_000;
/// How long the clock probe loads the device.
const LOAD_SPIN_NS: u64 = 150_000_000;

/// The id a probe block that never ran leaves in the buffer (filled with -1).
const UNWRITTEN: u32 = u32::MAX;

/// Where the blocks of a probe ran, for a partition and its remainder launched together.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementReport {
    pub requested_sms: u32,
    pub granted_sms: u32,
    /// Distinct SM ids the partition's blocks reported, ascending.
    pub sm_ids: Vec<u32>,
    /// SMs the remainder was granted (0 for the whole device).
    pub rest_sms: u32,
    /// Distinct SM ids the remainder's blocks reported, ascending.
    pub rest_ids: Vec<u32>,
    pub total_sms: u32,
}

impl PlacementReport {
    /// Why this partition cannot be trusted, or `None` when its placement holds.
    pub fn problem(&self) -> Option<String> {
        let ids: BTreeSet<u32> = self.sm_ids.iter().copied().collect();
        let rest: BTreeSet<u32> = self.rest_ids.iter().copied().collect();
        if self.granted_sms != self.requested_sms {
            return Some(format!(
                "asked for {} SMs, the split granted {}",
                self.requested_sms, self.granted_sms
            ));
        }
        if ids.len() != self.granted_sms as usize {
            return Some(format!(
                "granted {} SMs but its blocks ran on {} distinct SMs",
                self.granted_sms,
                ids.len()
            ));
        }
        if rest.len() != self.rest_sms as usize {
            return Some(format!(
                "the remainder holds {} SMs but its blocks ran on {} distinct SMs",
                self.rest_sms,
                rest.len()
            ));
        }
        if let Some(shared) = ids.intersection(&rest).next() {
            return Some(format!(
                "SM {shared} ran blocks of both the partition and its remainder"
            ));
        }
        // Ids are not bounded by the SM count: PTX does not promise `%smid` is contiguous
        // ("`%nsmid` may be larger than the physical number of SMs"), and the counts and the
        // disjointness above already prove the placement. A block that never wrote its id
        // (the -1 the buffer was filled with) is another matter: it did not run.
        if ids.contains(&UNWRITTEN) || rest.contains(&UNWRITTEN) {
            return Some("a probe block did not record its SM (it never ran)".into());
        }
        if self.granted_sms + self.rest_sms != self.total_sms {
            return Some(format!(
                "partition ({}) and remainder ({}) do not add up to the device's {} SMs",
                self.granted_sms, self.rest_sms, self.total_sms
            ));
        }
        None
    }
}

/// Probe the partition of `sms` SMs and its remainder at once.
pub(super) fn probe(
    session: &mut Session,
    dev: sys::CUdevice,
    sms: u32,
    total: u32,
    target: nvrtc::Target,
) -> Result<PlacementReport, GpuError> {
    library(&mut session.libraries, SUPPORT, SUPPORT_SOURCE, target)?;
    let support = &session.libraries[SUPPORT];
    let part = partition(&mut session.partitions, dev, sms, total)?;
    let sides: Vec<&GreenContext> = [Some(&part.main), part.rest.as_ref()]
        .into_iter()
        .flatten()
        .collect();
    let mut launched = Vec::new();
    for side in &sides {
        let _current = Current::push(side.ctx)?;
        let func = support.function("wcetd_smid_probe")?;
        let blocks = side.sms * occupancy(func, 256, 0)?.max(1) * 2;
        let out = DeviceBuffer::upload(&HostBuf::I32(vec![-1; blocks as usize]), side.stream)?;
        let mut params = [Param::Ptr(out.ptr), Param::U64(PROBE_SPIN_NS)];
        let shape = Shape::new([blocks, 1, 1], [256, 1, 1]);
        launch(func, shape, side.stream, &mut params)?;
        launched.push(out);
    }
    let mut ids = Vec::new();
    for (side, out) in sides.iter().zip(&launched) {
        let _current = Current::push(side.ctx)?;
        let HostBuf::I32(raw) = out.download(&HostBuf::I32(Vec::new()), side.stream)? else {
            unreachable!("download keeps the buffer type")
        };
        let set: BTreeSet<u32> = raw.iter().map(|&id| id as u32).collect();
        ids.push(set.into_iter().collect::<Vec<u32>>());
    }
    for (side, out) in sides.iter().zip(launched) {
        let _current = Current::push(side.ctx)?;
        drop(out);
    }
    let rest_ids = ids.get(1).cloned().unwrap_or_default();
    Ok(PlacementReport {
        requested_sms: sms,
        granted_sms: part.main.sms,
        sm_ids: ids.swap_remove(0),
        rest_sms: part.rest.as_ref().map_or(0, |r| r.sms),
        rest_ids,
        total_sms: total,
    })
}

/// Spin every SM of the device for [`LOAD_SPIN_NS`], for the clock probe to read the clock under
/// load.
pub(super) fn load(
    session: &mut Session,
    dev: sys::CUdevice,
    total: u32,
    target: nvrtc::Target,
) -> Result<(), GpuError> {
    library(&mut session.libraries, SUPPORT, SUPPORT_SOURCE, target)?;
    let support = &session.libraries[SUPPORT];
    let whole = &partition(&mut session.partitions, dev, total, total)?.main;
    let _current = Current::push(whole.ctx)?;
    let func = support.function("wcetd_smid_probe")?;
    let blocks = whole.sms * occupancy(func, 256, 0)?.max(1);
    let out = DeviceBuffer::alloc(blocks as usize * 4)?;
    let mut params = [Param::Ptr(out.ptr), Param::U64(LOAD_SPIN_NS)];
    launch(
        func,
        Shape::new([blocks, 1, 1], [256, 1, 1]),
        whole.stream,
        &mut params,
    )?;
    sync_stream(whole.stream)
}

/// Launch a kernel that executes `trap`: a sticky device fault. Waited on as a user's launch is
/// (polled, up to the launch time limit), so the real-GPU test proves that the polled wait
/// reports a sticky error as a fault rather than spinning into [`GpuError::Hung`].
pub(super) fn trap(
    session: &mut Session,
    dev: sys::CUdevice,
    total: u32,
    target: nvrtc::Target,
) -> Result<(), GpuError> {
    library(&mut session.libraries, SUPPORT, SUPPORT_SOURCE, target)?;
    let support = &session.libraries[SUPPORT];
    let whole = &partition(&mut session.partitions, dev, total, total)?.main;
    let _current = Current::push(whole.ctx)?;
    let func = support.function("wcetd_trap")?;
    launch(
        func,
        Shape::new([1, 1, 1], [1, 1, 1]),
        whole.stream,
        &mut [],
    )?;
    sync_stream_within(whole.stream, "the trap kernel", launch_timeout())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(ids: std::ops::Range<u32>, rest: std::ops::Range<u32>) -> PlacementReport {
        PlacementReport {
            requested_sms: ids.len() as u32,
            granted_sms: ids.len() as u32,
            sm_ids: ids.collect(),
            rest_sms: rest.len() as u32,
            rest_ids: rest.collect(),
            total_sms: 132,
        }
    }

    #[test]
    fn disjoint_complete_sets_prove_a_partition() {
        assert_eq!(report(0..8, 8..132).problem(), None);
        assert_eq!(report(0..132, 0..0).problem(), None);
    }

    #[test]
    fn overlap_missing_sms_and_bad_ids_are_named() {
        let mut shared = report(0..8, 8..132);
        shared.rest_ids[0] = 3;
        shared.rest_ids.sort_unstable();
        let p = shared.problem().unwrap();
        assert!(p.contains("SM 3 ran blocks of both"), "{p}");

        let mut fewer = report(0..8, 8..132);
        fewer.sm_ids.pop();
        assert!(fewer.problem().unwrap().contains("ran on 7 distinct SMs"));

        // `%smid` need not be contiguous: an id past the SM count is no problem by itself.
        let mut gapped = report(0..8, 8..132);
        gapped.rest_ids.pop();
        gapped.rest_ids.push(140);
        assert_eq!(gapped.problem(), None);

        let mut idle = report(0..8, 8..132);
        idle.sm_ids.pop();
        idle.sm_ids.push(UNWRITTEN);
        assert!(idle.problem().unwrap().contains("did not record its SM"));

        let mut short = report(0..8, 8..120);
        short.total_sms = 132;
        assert!(short.problem().unwrap().contains("do not add up"));

        let mut rounded = report(0..16, 16..132);
        rounded.requested_sms = 12;
        assert!(rounded.problem().unwrap().contains("asked for 12"));
    }
}
