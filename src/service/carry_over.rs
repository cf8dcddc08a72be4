//! The calibration served at start, and rule 1 across a change of device fingerprint (a new
//! driver, CUDA version or clock policy, or another card): with no calibration for this
//! fingerprint, the most recent other one is served stale until recalibrated, and every launch
//! time production reported on this card under an earlier configuration (and under the stale
//! calibration's own) holds its bounds up, so no bound is served lower after the change than
//! before it.

use crate::gpu::{DeviceInfo, Interference};
use crate::store::{Calibration, Origin, Store};

/// A stored calibration fitted allowing for less process shift than is configured now (one
/// stored before the shift existed, 2026-11-24, or under a smaller `--process-shift`) has every
/// bound raised by the difference before it is served: on a real H200 a bound without it was
/// under a launch of another process (docs/hardware-validation.md, section 5). Only raises. The
/// file keeps what was fitted until a job saves the calibration (then the raised tables, with the
/// shift they allow for: never raised twice); until then this is redone at each start.
pub(super) fn allow_for_process_shift(calibration: &mut Calibration, shift: f64) {
    let mut raised = Vec::new();
    for tag in [Interference::Isolated, Interference::Contended] {
        for (name, cal) in calibration.tables_mut(tag).iter_mut() {
            if cal.table.allow_for_process_shift(shift).is_some() {
                raised.push(format!("{name} ({tag})"));
            }
        }
    }
    if !raised.is_empty() {
        tracing::warn!(
            kernels = %raised.join(", "),
            process_shift = shift,
            "stored bounds allowed for less process shift than configured: raised by the difference; recalibrate to refit them"
        );
    }
}

/// The calibration to serve at start: this device's, or (marked stale by its fingerprints) the
/// most recent one of this card under another fingerprint or of another card, not one of the
/// `siblings` (the host's other cards, served beside it or left out by `--devices`), or nothing. A sibling's calibration is its
/// own: served here, one GPU's bounds, and the times reported on it, raised another's (a
/// black-box hunt found it, where api.md says GPUs never mix).
pub(super) fn initial_calibration(
    store: &Store,
    device: &DeviceInfo,
    siblings: &[String],
) -> Calibration {
    if let Some(cal) = store.load(&device.fingerprint) {
        tracing::info!(kernels = cal.kernels.len(), "loaded calibration");
        return cal;
    }
    let Some(mut old) = store.load_latest_other(&device.fingerprint, siblings) else {
        return Calibration::new(device.clone());
    };
    tracing::warn!(
        old_device = %old.device.name,
        old_uuid = %old.device.fingerprint.uuid,
        "no calibration for this device fingerprint; serving the previous one as stale until recalibrated"
    );
    let whose = if old.device.fingerprint.uuid == device.fingerprint.uuid {
        format!(
            "this card's calibration under another configuration (driver {}, CUDA {}, clocks {})",
            old.device.fingerprint.driver,
            old.device.fingerprint.cuda,
            old.device.fingerprint.clock_policy
        )
    } else {
        format!(
            "another card's calibration ({}, {})",
            old.device.name, old.device.fingerprint.uuid
        )
    };
    for tag in [Interference::Isolated, Interference::Contended] {
        for cal in old.tables_mut(tag).values_mut() {
            let until = match cal.origin {
                Origin::Imported | Origin::Bundle => {
                    "until measurements made under this configuration are imported"
                }
                Origin::Builtin | Origin::Manifest => "until this device is recalibrated",
            };
            cal.table
                .notes
                .push(format!("served stale at start: {whose}, {until}"));
        }
    }
    keep_observed_floors(store, &mut old, &device.fingerprint);
    Calibration {
        device: device.clone(),
        ..old
    }
}

/// Rule 1 across a fingerprint change: the floors production reported under the stale
/// calibration's own fingerprint (kept in that fingerprint's observations file, which this
/// device does not load) are raised into its tables, so a bound served before the change is not
/// served lower after it. So are those reported on this card under any other earlier
/// fingerprint (its bounds may be the ones served last, whether or not its calibration file
/// survived: it may never have been written, or be damaged). An isolated floor holds up the
/// contended bound too.
fn keep_observed_floors(store: &Store, old: &mut Calibration, now: &crate::gpu::Fingerprint) {
    use crate::observe::ObservationFile;
    let stale_own = ObservationFile::new(store.dir(), old.fingerprint());
    let current = ObservationFile::new(store.dir(), now);
    // A fingerprint's floors may be in its journal alone (a crash before its first save).
    let digests: std::collections::BTreeSet<String> = std::fs::read_dir(store.dir())
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let rest = name.strip_prefix("observations-")?;
            [".json", ".floors", ".floors.old"]
                .iter()
                .find_map(|suffix| rest.strip_suffix(suffix))
                .map(str::to_string)
        })
        .collect();
    let this_card: Vec<ObservationFile> = digests
        .iter()
        .map(|digest| ObservationFile::of_digest(store.dir(), digest))
        .filter(|f| f.path() != stale_own.path() && f.path() != current.path())
        // This card's, and, to be safe, any whose card cannot be read (a damaged first line):
        // its times are applied, or what of it cannot be read is named in the notes.
        .filter(|f| {
            f.device_uuid()
                .is_none_or(|uuid| uuid.is_empty() || uuid == now.uuid)
        })
        .collect();
    keep_floors_of(&stale_own, "the previous fingerprint", old);
    for file in this_card {
        let whose = format!(
            "an earlier configuration of this card ({})",
            file.path().display()
        );
        keep_floors_of(&file, &whose, old);
    }
}

/// [`keep_observed_floors`] for one observations file, reported under `whose`.
fn keep_floors_of(file: &crate::observe::ObservationFile, whose: &str, old: &mut Calibration) {
    // Read only: that file belongs to the other fingerprint, which this daemon never rewrites,
    // so a damaged one is left where it is rather than moved aside.
    let (observations, unread) = file.read();
    if let Some(why) = &unread {
        tracing::error!(path = %file.path().display(), "launch times reported under {whose} could not all be read: {why}");
        for t in [Interference::Isolated, Interference::Contended] {
            for cal in old.tables_mut(t).values_mut() {
                cal.table.notes.push(format!(
                    "launch times reported from production under {whose} could not all be read ({}: {why}); this stale bound may be below some of them",
                    file.path().display()
                ));
            }
        }
    }
    for (kernel, sms, tag, series) in observations.iter() {
        // A contended time holds up the contended calibration, or, with none, the isolated one,
        // as it held up `GetBound` there (judged as untagged); it was once dropped.
        let has_contended = old.tables(Interference::Contended).contains_key(kernel);
        let tags: &[Interference] = match tag {
            Interference::Isolated => &[Interference::Isolated, Interference::Contended],
            Interference::Contended if has_contended => &[Interference::Contended],
            Interference::Contended => &[Interference::Isolated],
        };
        for &t in tags {
            let Some(cal) = old.tables_mut(t).get_mut(kernel) else {
                continue;
            };
            cal.inherited_floors.push(crate::store::InheritedFloor {
                sms,
                ns: series.floor_ns,
                at: series.floor_at,
                clock_mhz: series.floor_clock_mhz,
            });
            if cal.table.raise_to(sms, series.floor_ns) {
                cal.table.notes.push(format!(
                    "raised to {} ns at {sms} SMs by a launch time reported from production under {whose} ({})",
                    series.floor_ns,
                    series.floor_at.to_rfc3339()
                ));
            }
        }
    }
}
