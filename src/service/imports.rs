//! Calibrations made elsewhere: samples measured on another machine (`ImportSamples`) and
//! bundles of another daemon's calibrations (export, import, and the arrival check on this
//! card). Each is refused at the call, and again when its job runs, where it would take the
//! place of bounds this daemon measured for the code it has now, or bring bounds of other code:
//! imported bounds must never hide a launch timed here.

use super::worker::{commit, fail, nothing_imported, probed_recipe, progress_reporter, set_job};
use super::*;

impl Service {
    /// Make bounds from samples measured elsewhere, as (partition size, ns) pairs; `options` may
    /// hold `blocks` and `blocks_per_sm` (the launch geometry), `interference` and `source`. The
    /// kernel need not be known. Refused whole, with the reason: an invalid name, no samples, a
    /// zero time, a size this device cannot realise, more than [`MAX_IMPORTED_SAMPLES`].
    pub fn import_samples(
        &self,
        kernel: &str,
        samples: &[(u32, u64)],
        options: ImportOptions,
    ) -> Result<u64> {
        let _in_span = self.in_span();
        if !manifest::valid_name(kernel) {
            return Err(ServiceError::InvalidArgs(format!(
                "kernel name `{kernel}` is not accepted; accepted: 1 to 64 of A-Z a-z 0-9 _ . -"
            )));
        }
        let by_size = self.samples_by_size(samples)?;
        check_source(&options.source)?;
        let tag = options.interference;
        let code = self
            .catalogue()
            .get(kernel)
            .map(KernelSpec::code_digest)
            .unwrap_or_default();
        if let Some(why) = measured_here(&self.inner, kernel, tag, &code) {
            return Err(ServiceError::InvalidArgs(why));
        }
        let imported = calibrate::Imported {
            kernel: kernel.to_string(),
            by_size,
            geometry: options.geometry,
            interference: tag,
            source: options.source,
            batch_slowdown: options.batch_slowdown,
            // Taken now, not when the job runs: a reload in between must not make samples of
            // the old code pass for the new.
            code,
        };
        let work = Work::Import(Box::new(imported));
        let id = self.enqueue(work, vec![kernel.to_string()], vec![tag])?;
        tracing::info!(job = id, kernel, samples = samples.len(), "import queued");
        Ok(id)
    }

    /// `samples` as (partition size, ns) pairs grouped by size, or why they are refused: none,
    /// more than one call may carry, a time out of range, or a size this device cannot realise.
    fn samples_by_size(&self, samples: &[(u32, u64)]) -> Result<BTreeMap<u32, Vec<u64>>> {
        if samples.is_empty() {
            return Err(ServiceError::InvalidArgs(
                "no samples; accepted: a non-empty array of (partition size, time in ns)".into(),
            ));
        }
        if samples.len() > MAX_IMPORTED_SAMPLES {
            return Err(ServiceError::InvalidArgs(format!(
                "{} samples in one call; accepted: at most {MAX_IMPORTED_SAMPLES} in one call (a kernel's bounds come from one call's samples)",
                samples.len()
            )));
        }
        let sizes = &self.inner.device.partition_sizes;
        let mut by_size: BTreeMap<u32, Vec<u64>> = BTreeMap::new();
        for (i, &(sms, t)) in samples.iter().enumerate() {
            if t == 0 || t > crate::samples::MAX_TIME_NS {
                // The limits `Report` keeps: a longer time is a unit mistake, and as a sample it
                // would make every bound of the kernel useless.
                return Err(ServiceError::InvalidArgs(format!(
                    "sample {i} has a time of {t} ns; accepted: 1 ns to one hour ({} ns)",
                    crate::samples::MAX_TIME_NS
                )));
            }
            if !sizes.contains(&sms) {
                return Err(ServiceError::InvalidPartition(format!(
                    "sample {i} is at {sms} SMs, which this device cannot realise; accepted: {}",
                    join(sizes)
                )));
            }
            by_size.entry(sms).or_default().push(t);
        }
        Ok(by_size)
    }

    /// This device's calibrations of `kernels` (every calibrated kernel when empty), both tags,
    /// as a bundle for another daemon with the same configuration.
    pub fn export_calibration(&self, kernels: &[String]) -> Result<crate::bundle::Bundle> {
        let snap = self.snapshot();
        for k in kernels {
            self.known(k)?;
        }
        let wanted = |k: &str| kernels.is_empty() || kernels.iter().any(|w| w == k);
        // Only what is served: a removed manifest's calibration waits in the store for it, and
        // a bundle holding it would be refused by a daemon that does not load that manifest.
        let catalogue = self.catalogue();
        let mut calibrations = Vec::new();
        for tag in [Interference::Isolated, Interference::Contended] {
            for (name, cal) in snap.tables(tag) {
                if wanted(name) && served(&catalogue, name, cal) && !self.is_stale(cal) {
                    let cal = self.held_up_by_production(name, tag, cal);
                    calibrations.push(crate::bundle::Entry::new(name, tag, cal));
                }
            }
        }
        if calibrations.is_empty() {
            return Err(ServiceError::NotCalibrated(format!(
                "nothing to export: no current (not stale) calibration of the kernels asked for; calibrate first (`{} recalibrate`)",
                self.wcetctl()
            )));
        }
        Ok(crate::bundle::Bundle {
            format: crate::bundle::FORMAT,
            exported_at: Utc::now(),
            host: crate::measure::hostname(),
            fingerprint: self.inner.device.fingerprint.clone(),
            calibrations,
        })
    }

    /// `cal` with each bound raised to the production floor under it here: a bundle carries
    /// what this card has seen, not only what its campaign timed (an export after an overrun
    /// once shipped bounds an eighth of the time production had reported, and every importer
    /// served them). Launches and summaries are left as timed, so the bundle still agrees with
    /// itself; only bounds rise.
    ///
    /// Where the kernel has no calibration of the other tag, its times (judged, and holding up
    /// `GetBound`, as untagged) hold up this one too: the importer's `GetBound` is this table.
    fn held_up_by_production(
        &self,
        name: &str,
        tag: Interference,
        cal: &KernelCalibration,
    ) -> KernelCalibration {
        let other = match tag {
            Interference::Isolated => Interference::Contended,
            Interference::Contended => Interference::Isolated,
        };
        let alone = !self.snapshot().tables(other).contains_key(name);
        let mut cal = cal.clone();
        // Samples imported before sources were checked may name one no bundle check takes.
        let host = &mut cal.campaign.environment.host;
        *host = host
            .chars()
            .map(|c| if c.is_control() { '?' } else { c })
            .collect();
        while host.len() > 256 {
            host.pop();
        }
        let sizes: Vec<u32> = cal.table.entries.iter().map(|e| e.sms).collect();
        let mut raised = Vec::new();
        for m in sizes {
            let floor = |t| self.floor_at_calibrated_clock(name, m, t);
            let floor_ns = if alone {
                floor(Some(tag)).max(floor(None))
            } else {
                floor(Some(tag))
            };
            if cal.table.raise_to(m, floor_ns) {
                raised.push(format!("{m} SMs to {floor_ns} ns"));
            }
        }
        if !raised.is_empty() {
            cal.table.notes.push(format!(
                "raised when exported from {} to launch times production reported there: {}",
                crate::measure::hostname(),
                raised.join(", ")
            ));
        }
        cal
    }

    /// Take another daemon's calibrations. Accepted only where the bundle's fingerprint matches
    /// this device (model, driver, CUDA version, clock policy), otherwise refused with what
    /// differs; with `force` they are imported as stale instead. Every kernel must be known here.
    /// A bundle whose bounds are below launches it records is refused. Nothing is imported unless
    /// everything is: the check on this card, any recalibration it calls for, and then the
    /// publishing run as one job, and a failure anywhere leaves the bounds as they were. Returns
    /// the kernels.
    pub fn import_calibration(&self, text: &str, force: bool) -> Result<Vec<String>> {
        let _in_span = self.in_span();
        let bundle = crate::bundle::parse(text).map_err(ServiceError::InvalidArgs)?;
        let stale = self.refuse_bundle(&bundle, force)?;
        let source = format!(
            "bundle from {} exported {}",
            bundle.host,
            bundle.exported_at.to_rfc3339()
        );
        let mut names = Vec::new();
        // Each keeps the exporting card's fingerprint (served stale) unless the job's arrival
        // check passes on this card, which is when it becomes this device's (`check_bundle`).
        let calibrations = bundle
            .calibrations
            .into_iter()
            .map(|e| {
                let mut cal = e.calibration;
                crate::bundle::realisable_only(&mut cal, &self.inner.device.partition_sizes);
                cal.source = bundled_source(&source, cal.origin, &cal.source);
                cal.origin = Origin::Bundle;
                if !names.contains(&e.kernel) {
                    names.push(e.kernel.clone());
                }
                (e.interference, e.kernel, cal)
            })
            .collect::<Vec<_>>();
        let mut tags: Vec<Interference> = calibrations.iter().map(|c| c.0).collect();
        tags.sort();
        tags.dedup();
        let work = Work::Bundle {
            calibrations,
            verify: !stale,
        };
        let id = self.enqueue(work, names.clone(), tags)?;
        tracing::info!(job = id, "bundle import queued: {}", names.join(", "));
        Ok(names)
    }

    /// Why `bundle` is refused whole, if it is: a bundle that does not agree with itself (even
    /// with `force`), another configuration without `force`, a kernel unknown here, or a bound
    /// below a launch the bundle itself records (an edited or corrupted file, never served).
    /// Otherwise whether it is of another configuration (imported stale).
    fn refuse_bundle(&self, bundle: &crate::bundle::Bundle, force: bool) -> Result<bool> {
        // Refused whatever `force` says: what follows decides from the bundle's header, so the
        // header must speak for every calibration in it.
        refuse_inconsistent(bundle)?;
        let diffs = crate::bundle::differences(&self.inner.device.fingerprint, &bundle.fingerprint);
        if !diffs.is_empty() && !force {
            return Err(ServiceError::InvalidArgs(format!(
                "the bundle was measured under another configuration: {}; accepted: a bundle from a device with the same model, driver, CUDA version and clock policy, or force (`{} import-calibration --force`) to import it as stale",
                diffs.join("; "),
                self.wcetctl()
            )));
        }
        self.refuse_missing_sizes(bundle)?;
        self.refuse_unknown_kernels(bundle)?;
        // Bounds of other code than this daemon loads under the name would be stale on arrival,
        // and would take the place of the bounds it has for its own code: refused, forced or not
        // (and again when the job runs, in case a reload came in between).
        let entries = bundle
            .calibrations
            .iter()
            .map(|e| (e.kernel.as_str(), e.calibration.code.as_str()));
        if let Some(why) = bundle_of_other_code(&self.catalogue(), entries, &self.wcetctl()) {
            return Err(ServiceError::InvalidArgs(format!(
                "{why}; nothing imported"
            )));
        }
        refuse_bounds_under_launches(bundle)?;
        Ok(!diffs.is_empty())
    }

    /// Why `bundle` is refused for lacking sizes this device serves, if it is.
    fn refuse_missing_sizes(&self, bundle: &crate::bundle::Bundle) -> Result<()> {
        let missing = crate::bundle::missing_sizes(bundle, &self.inner.device.partition_sizes);
        if !missing.is_empty() {
            return Err(ServiceError::InvalidArgs(format!(
                "the bundle lacks sizes this device serves ({}); nothing imported; accepted: a calibration with a bound at every realisable size of this device ({})",
                missing.join("; "),
                self.inner
                    .device
                    .partition_sizes
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        }
        Ok(())
    }

    /// Why `bundle` is refused for holding kernels this daemon does not know, if it is.
    fn refuse_unknown_kernels(&self, bundle: &crate::bundle::Bundle) -> Result<()> {
        let mut unknown: Vec<&str> = bundle
            .calibrations
            .iter()
            .map(|e| e.kernel.as_str())
            .filter(|k| self.known(k).is_err())
            .collect();
        unknown.sort_unstable();
        unknown.dedup();
        if !unknown.is_empty() {
            // Quoted as every unknown name is, and at most twenty: a bundle of long names made an
            // error as long as itself.
            let unknown: Vec<String> = unknown.iter().map(|k| super::quoted_name(k)).collect();
            return Err(ServiceError::UnknownKernel(format!(
                "the bundle holds kernels this daemon does not know: {}; accepted: {} (add their manifests first)",
                super::names_in_a_message_listed_by(&unknown, "the bundle"),
                self.some_kernels()
            )));
        }
        Ok(())
    }
}

/// Why `bundle` is refused for not agreeing with itself (an edited or corrupted file), if it is.
fn refuse_inconsistent(bundle: &crate::bundle::Bundle) -> Result<()> {
    let bad = crate::bundle::inconsistencies(bundle);
    if !bad.is_empty() {
        return Err(ServiceError::InvalidArgs(format!(
            "the bundle does not agree with itself ({} findings; {}); nothing imported; accepted: a bundle as `wcetctl export` writes it",
            bad.len(),
            bad.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        )));
    }
    Ok(())
}

/// Why `bundle` is refused for a bound below a launch it records itself (an edited or corrupted
/// file, never served), if it is.
fn refuse_bounds_under_launches(bundle: &crate::bundle::Bundle) -> Result<()> {
    let under: Vec<String> = bundle
        .calibrations
        .iter()
        .flat_map(|e| {
            let tag = e.interference;
            e.calibration
                .bounds_under_their_launches()
                .into_iter()
                .map(move |(m, b, t)| {
                    format!(
                        "{} ({tag}) at {m} SMs: bound {b} ns, a launch of {t} ns",
                        e.kernel
                    )
                })
        })
        .collect();
    if !under.is_empty() {
        return Err(ServiceError::InvalidArgs(format!(
            "the bundle's bounds are below launches it records itself ({} sizes; {}); nothing imported; accepted: a bundle as `wcetctl export` writes it, every bound at least every launch at its size",
            under.len(),
            under.iter().take(3).cloned().collect::<Vec<_>>().join("; ")
        )));
    }
    Ok(())
}

/// What a bundle's calibration says it came from here: the bundle, and where it was not timed
/// on the exporting daemon itself, what that daemon said of it (samples imported there lost
/// that they were timed elsewhere, and their source, on arrival: a hunt). Bounded, since a
/// bundle of bundles nests.
fn bundled_source(bundle: &str, origin: Origin, source: &str) -> String {
    const MOST: usize = 600;
    let there = match origin {
        Origin::Imported => "samples imported there",
        Origin::Bundle => "a bundle there",
        Origin::Builtin | Origin::Manifest => return bundle.to_string(),
    };
    // The bundle's own text, checked by nothing else: a control character would reach every
    // terminal that shows the bound (a review).
    let source: String = source
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    let mut said = format!("{bundle}; {there}: {source}");
    if said.len() > MOST {
        let mut end = MOST;
        while !said.is_char_boundary(end) {
            end -= 1;
        }
        said.truncate(end);
        said.push('…');
    }
    said
}

/// The longest `source` an import may name (it is the campaign's host, which a bundle's check
/// takes up to 256 bytes, after `imported: `).
const MAX_SOURCE_BYTES: usize = 200;

/// Most samples one `ImportSamples` call may carry: what a bus carries in one message. Each
/// `(ut)` takes 16 bytes, and `dbus-daemon` refuses messages above 32 MiB (its default
/// `max_message_size`, the system and session buses alike), so 2,000,000 leave room for the rest
/// of the call. The 10,000,000 said until 2026-11-25 could never be sent: a hunt's 2,100,000
/// ended with "Broken pipe".
pub const MAX_IMPORTED_SAMPLES: usize = 2_000_000;

/// Why an import's `source` is refused, if it is. It is stored as the campaign's host and shown
/// with every bound: text a terminal would act on, or a length no export check takes, is refused
/// here.
fn check_source(source: &str) -> Result<()> {
    if source.chars().any(char::is_control) || source.len() > MAX_SOURCE_BYTES {
        return Err(ServiceError::InvalidArgs(format!(
            "option `source` is {} bytes{}; accepted: at most {MAX_SOURCE_BYTES} bytes of text without control characters",
            source.len(),
            if source.chars().any(char::is_control) {
                " with control characters"
            } else {
                ""
            }
        )));
    }
    Ok(())
}

/// Bounds from imported samples, published as a calibration's are.
pub(super) fn import(store: &Store, inner: &Inner, imported: &calibrate::Imported) -> JobEnd {
    // Checked again here: a calibration may have been published since the import was queued.
    let kernel = &imported.kernel;
    if let Some(why) = measured_here(inner, kernel, imported.interference, &imported.code) {
        return (JobState::Failed, format!("importing {kernel}: {why}"));
    }
    match calibrate::from_samples(imported, &inner.device, &inner.config.recipe) {
        Ok(cal) => {
            let mut publish = vec![(imported.interference, imported.kernel.clone(), cal)];
            let mut notes = Vec::new();
            hold_up_by_launches_here(inner, &mut publish, &mut notes);
            let (state, published) = commit(store, inner, publish, "imported");
            if state != JobState::Done || notes.is_empty() {
                return (state, published);
            }
            (state, format!("{published}; {}", notes.join("; ")))
        }
        Err(e) => fail(
            inner,
            format!("importing {}: {e}; bounds unchanged", imported.kernel),
        ),
    }
}

/// Why samples imported for `kernel` under `tag`, of the code whose digest is `code`, must not
/// be published: this daemon measured the kernel on this device, for the code the catalogue has
/// now, or for a manifest that is gone for the moment (its calibration waits in the store for
/// it); or the kernel's code changed since the samples were queued. Rule 1 keeps a bound above
/// every launch seen at its size, and imported bounds would replace those launches with ones
/// timed elsewhere. None when the import may go ahead (no calibration, an imported one, or one
/// of another device or code).
fn measured_here(inner: &Inner, kernel: &str, tag: Interference, code: &str) -> Option<String> {
    let catalogue = Arc::clone(
        &inner
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let spec = catalogue.get(kernel);
    let now = spec.map(KernelSpec::code_digest).unwrap_or_default();
    if now != code {
        return Some(format!(
            "the code of `{kernel}` changed since the samples were queued (a reload in between), so they are not of the code the catalogue has now; accepted: samples of the current code, imported again"
        ));
    }
    let snap = Arc::clone(
        &inner
            .snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let cal = snap.tables(tag).get(kernel)?;
    let own = matches!(cal.origin, Origin::Builtin | Origin::Manifest);
    // As `code_changed` takes it: a calibration from before code digests were recorded is of
    // the code unless the name is a manifest's now.
    let same_code =
        cal.code == now || (cal.code.is_empty() && spec.is_some_and(|k| k.manifest().is_none()));
    let waiting = spec.is_none() && cal.origin == Origin::Manifest;
    let this_device = cal.environment().fingerprint == inner.device.fingerprint;
    (own && this_device && (same_code || waiting)).then(|| format!(
        "`{kernel}` has {tag} bounds this daemon measured on this device (calibration {}{}), and imported samples would replace launches timed here with ones timed elsewhere; accepted: samples of a kernel with no current {tag} calibration measured here. Recalibrate it to refresh them (`{} recalibrate {kernel}`), or import the samples under another name",
        cal.id,
        if waiting { ", kept for its manifest, which is not loaded now" } else { ", for the code it has now" },
        inner.config.wcetctl()
    ))
}

/// Why a bundle's calibrations, as (kernel, code digest), are not of the code this daemon loads:
/// a kernel whose code differs, or that only a manifest not loaded now had (its measured
/// calibration waits in the store for it). None when every one is of the current code, or of a
/// kernel known only from imports (no code). The reload it advises starts `wcetctl`
/// ([`super::ServiceConfig::wcetctl`]).
fn bundle_of_other_code<'a>(
    catalogue: &Catalogue,
    entries: impl Iterator<Item = (&'a str, &'a str)>,
    wcetctl: &str,
) -> Option<String> {
    let mut names: Vec<&str> = entries
        .filter(|&(kernel, code)| {
            !code.is_empty()
                && catalogue
                    .get(kernel)
                    .is_none_or(|spec| spec.code_digest() != code)
        })
        .map(|(kernel, _)| kernel)
        .collect();
    names.sort_unstable();
    names.dedup();
    (!names.is_empty()).then(|| format!(
        "the bundle holds bounds of other code than this daemon loads under the names {} (changed, or a manifest not loaded now); accepted: a bundle exported by a daemon with the same manifests, modules and fill files (`{wcetctl} kernels reload` after updating them here)",
        names.join(", ")
    ))
}

/// Publish a bundle's calibrations, each made no tighter than this daemon's own fit of the
/// launches it ships. When they are this device's configuration each is then checked on this
/// card, and only then published as this device's: a kernel with a launch above its bound is
/// recalibrated here instead, never below a launch the check timed. A refit, check or
/// recalibration that fails imports nothing of the bundle.
pub(super) fn import_bundle(
    gpu: &mut dyn Gpu,
    store: &Store,
    inner: &Inner,
    job: &Job,
    calibrations: &[TaggedCalibration],
    verify: bool,
) -> JobEnd {
    let catalogue = Arc::clone(
        &inner
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let entries = calibrations
        .iter()
        .map(|(_, name, cal)| (name.as_str(), cal.code.as_str()));
    if let Some(why) = bundle_of_other_code(&catalogue, entries, &inner.config.wcetctl()) {
        return (JobState::Failed, format!("{why}; nothing imported"));
    }
    let (own, refitted) = match refit_bundle(inner, calibrations) {
        Ok(refit) => refit,
        Err(failed) => return failed,
    };
    let calibrations = own.as_slice();
    if !verify {
        let notes = refit_notes(&refitted, calibrations);
        return publish_as_they_came(store, inner, calibrations.to_vec(), notes);
    }
    let mut report = progress_reporter(inner, job);
    let checked = match check_bundle(gpu, inner, job, calibrations, &mut report) {
        Ok(checked) => checked,
        Err(failed) => return failed,
    };
    let BundleCheck {
        mut notes,
        mut publish,
        redo,
    } = checked;
    notes.splice(0..0, refit_notes(&refitted, &publish));
    if !redo.is_empty() {
        match recalibrate_failed(gpu, inner, job, redo, &mut notes, &mut report) {
            Ok(recalibrated) => publish.extend(recalibrated),
            Err(failed) => return failed,
        }
    }
    hold_up_by_launches_here(inner, &mut publish, &mut notes);
    note_weaker_than_configured(inner, &publish, &mut notes);
    let (state, published) = commit(store, inner, publish, "imported");
    if state != JobState::Done {
        return (state, published);
    }
    (JobState::Done, format!("{published}; {}", notes.join("; ")))
}

/// What the refit changed (`refitted`), for the calibrations published as they came (not those
/// recalibrated here, whose refitted tables are thrown away).
fn refit_notes(
    refitted: &[(Interference, String, String)],
    publish: &[TaggedCalibration],
) -> Vec<String> {
    refitted
        .iter()
        .filter(|(tag, name, _)| publish.iter().any(|p| p.0 == *tag && p.1 == *name))
        .map(|(tag, name, note)| format!("{name} ({tag}): {note}"))
        .collect()
}

/// Publish a bundle's calibrations of another configuration (imported stale, never checked
/// here) as they came, held up by the launches this card timed, with `notes` on what changed.
fn publish_as_they_came(
    store: &Store,
    inner: &Inner,
    mut publish: Vec<TaggedCalibration>,
    mut notes: Vec<String>,
) -> JobEnd {
    hold_up_by_launches_here(inner, &mut publish, &mut notes);
    let (state, published) = commit(store, inner, publish, "imported");
    if state != JobState::Done || notes.is_empty() {
        return (state, published);
    }
    (state, format!("{published}; {}", notes.join("; ")))
}

/// A note for each calibration in `publish` stated at a weaker exceedance than this daemon is
/// configured for: admission refuses it unless accepted, and the importer should know why.
fn note_weaker_than_configured(
    inner: &Inner,
    publish: &[TaggedCalibration],
    notes: &mut Vec<String>,
) {
    let configured = inner.config.recipe.method_config.exceedance;
    for (tag, name, cal) in publish {
        let (stated, _) = cal.table.stated_exceedance();
        if crate::model::weaker_than(stated, configured) {
            notes.push(format!(
                "{name} ({tag}): stated at {stated:e} per launch, weaker than the configured {configured:e} (admission refuses it unless accepted)"
            ));
        }
    }
}

/// Rule 1 across imports: a calibration about to be published from elsewhere (a bundle, or
/// samples) never has a bound below a launch this card timed for the code it is of. Those are
/// the launches of the calibration it replaces, where this daemon measured that one on this
/// card, and the ones an earlier import carried the same way (`launches_here`): each bound is
/// raised to the longest at its size, and they go on with it, so that the next import is held
/// up too. (A forced H200 bundle once replaced a simulated H100's own bounds with ones a seventh
/// of its launches; then the fix held for one import only.) Launches another daemon carried
/// (a bundle's own `launches_here`) are that card's: its bounds already hold them.
fn hold_up_by_launches_here(
    inner: &Inner,
    publish: &mut [TaggedCalibration],
    notes: &mut Vec<String>,
) {
    let snap = Arc::clone(
        &inner
            .snapshot
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    for (tag, name, cal) in publish.iter_mut() {
        if matches!(cal.origin, Origin::Builtin | Origin::Manifest) {
            // Measured here now (a bundle's kernel recalibrated after its check): it replaces
            // the old as any recalibration does.
            continue;
        }
        cal.launches_here.clear();
        let Some(old) = snap.tables(*tag).get(name.as_str()) else {
            continue;
        };
        let here = launches_here_of(inner, name, old);
        let raised: Vec<String> = here
            .iter()
            .filter(|l| cal.table.raise_to_launch(l.sms, l.ns))
            .map(|l| format!("{} SMs to {} ns", l.sms, l.ns))
            .collect();
        cal.launches_here = here;
        if !raised.is_empty() {
            notes.push(format!(
                "{name} ({tag}): bounds raised to the longest launches this card timed for the code (for the calibration this import replaces, or one before it): {}",
                raised.join(", ")
            ));
        }
    }
}

/// The longest launch at each size this card timed for the code `name` has now, as far as
/// `old` (the calibration being replaced) knows: its own launches where this daemon measured
/// it on this card, and those it carried from an earlier import. None where `old` is of other
/// code.
fn launches_here_of(
    inner: &Inner,
    name: &str,
    old: &KernelCalibration,
) -> Vec<crate::store::LaunchHere> {
    let catalogue = Arc::clone(
        &inner
            .catalogue
            .read()
            .unwrap_or_else(PoisonError::into_inner),
    );
    let spec = catalogue.get(name);
    let now = spec.map(KernelSpec::code_digest).unwrap_or_default();
    // As `measured_here` takes it: a calibration from before code digests were recorded is of
    // the code unless the name is a manifest's now.
    let same_code =
        old.code == now || (old.code.is_empty() && spec.is_some_and(|k| k.manifest().is_none()));
    if !same_code {
        return Vec::new();
    }
    let mut longest: BTreeMap<u32, crate::store::LaunchHere> = BTreeMap::new();
    let mut keep = |l: crate::store::LaunchHere| {
        let at = longest.entry(l.sms).or_insert(l);
        if l.ns > at.ns {
            *at = l;
        }
    };
    old.launches_here.iter().copied().for_each(&mut keep);
    let own = matches!(old.origin, Origin::Builtin | Origin::Manifest)
        && old.environment().fingerprint == inner.device.fingerprint;
    if own {
        for e in old.table.entries.iter().filter(|e| e.observed_max_ns > 0) {
            keep(crate::store::LaunchHere {
                sms: e.sms,
                ns: e.observed_max_ns,
                calibrated_at: old.calibrated_at,
            });
        }
    }
    longest.into_values().collect()
}

/// Every calibration of a bundle made no tighter than its refit here
/// ([`calibrate::no_tighter_than_own_fit`]), and (tag, kernel, what changed) where it changed one.
#[allow(clippy::type_complexity)]
fn refit_bundle(
    inner: &Inner,
    calibrations: &[TaggedCalibration],
) -> std::result::Result<(Vec<TaggedCalibration>, Vec<(Interference, String, String)>), JobEnd> {
    let mut own = Vec::with_capacity(calibrations.len());
    let mut changed = Vec::new();
    for (tag, name, cal) in calibrations {
        let (cal, note) =
            calibrate::no_tighter_than_own_fit(cal, &inner.device, &inner.config.recipe)
                .map_err(|e| nothing_imported(inner, &e, &format!("refitting {name} ({tag})")))?;
        changed.extend(note.map(|n| (*tag, name.clone(), n)));
        own.push((*tag, name.clone(), cal));
    }
    Ok((own, changed))
}

/// A bundle's calibrations after the arrival check: those to publish as they came, and the
/// kernels to recalibrate here with the launches the check timed (size, longest, bound).
struct BundleCheck {
    notes: Vec<String>,
    publish: Vec<TaggedCalibration>,
    redo: Vec<FailedCheck>,
}

/// The share of a bundle import's progress the arrival check takes; recalibrations, if any,
/// take the rest.
const BUNDLE_CHECK_SHARE: f64 = 0.3;

/// Run every kernel of the bundle this host knows at every size of its table.
fn check_bundle(
    gpu: &mut dyn Gpu,
    inner: &Inner,
    job: &Job,
    calibrations: &[TaggedCalibration],
    report: &mut impl FnMut(f64, bool),
) -> std::result::Result<BundleCheck, JobEnd> {
    let catalogue = inner
        .catalogue
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone();
    let mut out = BundleCheck {
        notes: Vec::new(),
        publish: Vec::new(),
        redo: Vec::new(),
    };
    for (i, (tag, name, cal)) in calibrations.iter().enumerate() {
        report(
            BUNDLE_CHECK_SHARE * i as f64 / calibrations.len() as f64,
            true,
        );
        let Some(kernel) = catalogue.get(name) else {
            out.not_checked(inner, (*tag, name, cal));
            continue;
        };
        set_job(inner, job.id, |s| {
            s.message = format!(
                "checking {name} ({tag}) on this card, kernel {} of {}",
                i + 1,
                calibrations.len()
            );
        });
        let checked = calibrate::check_on_arrival(gpu, kernel, &cal.table, *tag, &job.cancel)
            .map_err(|e| {
                nothing_imported(inner, &e, &format!("checking {name} ({tag}) on this card"))
            })?;
        out.checked(inner, (*tag, name, cal), kernel, checked);
    }
    Ok(out)
}

impl BundleCheck {
    /// A calibration of a kernel this host has nothing to run for: published as it came.
    fn not_checked(
        &mut self,
        inner: &Inner,
        (tag, name, cal): (Interference, &str, &KernelCalibration),
    ) {
        // Stale only where it was measured under another configuration: a bundle exported
        // here and imported back is this device's (the note said stale while it was not).
        let served = if cal.campaign.environment.fingerprint == inner.device.fingerprint {
            "served as measured under this device's configuration"
        } else {
            "served stale (the exporting card's configuration)"
        };
        self.notes.push(format!(
            "{name} ({tag}): not checked, nothing to run here: {served}"
        ));
        self.publish.push((tag, name.to_string(), cal.clone()));
    }

    /// A calibration the check ran `kernel` for, with the launches it timed as (size, longest,
    /// bound): published as this device's where every launch held, recalibrated otherwise.
    fn checked(
        &mut self,
        inner: &Inner,
        (tag, name, cal): (Interference, &str, &KernelCalibration),
        kernel: &KernelSpec,
        checked: Vec<(u32, u64, u64)>,
    ) {
        let over: Vec<_> = checked.iter().filter(|(_, t, b)| t > b).collect();
        match over.first() {
            None => {
                // Same configuration and held here: served as this device's. An older exporter
                // recorded no code; the check ran this catalogue's, so that is what the bounds
                // are of now. A recorded digest stays, and other code than ours is served stale.
                let mut cal = cal.clone();
                cal.campaign.environment.fingerprint = inner.device.fingerprint.clone();
                if cal.code.is_empty() {
                    cal.code = kernel.code_digest();
                }
                self.notes
                    .push(format!("{name} ({tag}): held on this card"));
                self.publish.push((tag, name.to_string(), cal));
            }
            Some((m, t, b)) => {
                self.notes.push(format!(
                    "{name} ({tag}): {} sizes above their bound on this card (at {m} SMs {t} ns > {b} ns): recalibrated",
                    over.len()
                ));
                self.redo.push((tag, kernel.clone(), checked));
            }
        }
    }
}

/// Recalibrate the kernels that failed the arrival check, as a job's kernels are (with the
/// device's delays and slowdowns probed), each bound at least the longest launch the check timed.
fn recalibrate_failed(
    gpu: &mut dyn Gpu,
    inner: &Inner,
    job: &Job,
    redo: Vec<FailedCheck>,
    notes: &mut Vec<String>,
    report: &mut impl FnMut(f64, bool),
) -> std::result::Result<Vec<TaggedCalibration>, JobEnd> {
    let probed = probed_recipe(gpu, inner, job)?;
    let n = redo.len();
    let mut recalibrated = Vec::new();
    for (i, (tag, kernel, checked)) in redo.into_iter().enumerate() {
        let mut recipe = probed;
        recipe.campaign.interference = tag;
        set_job(inner, job.id, |s| {
            s.message = format!(
                "recalibrating {} ({tag}) on this card, kernel {} of {n}",
                kernel.name,
                i + 1
            );
        });
        let mut progress = |f: f64| {
            let share = (i as f64 + f) / n as f64;
            report(
                BUNDLE_CHECK_SHARE + (1.0 - BUNDLE_CHECK_SHARE) * share,
                f >= 1.0,
            )
        };
        let mut cal =
            calibrate::calibrate_kernel(gpu, &kernel, &recipe, &job.cancel, &mut progress)
                .map_err(|e| {
                    nothing_imported(inner, &e, &format!("recalibrating {}", kernel.name))
                })?;
        for (m, t, _) in checked {
            if cal.table.raise_to_launch(m, t) {
                let why = format!(
                    "bound at {m} SMs raised to a launch of {t} ns timed by the arrival check of an imported bundle"
                );
                notes.push(format!("{} ({tag}): {why}", kernel.name));
                cal.table.notes.push(why);
            }
        }
        recalibrated.push((tag, kernel.name.clone(), cal));
    }
    Ok(recalibrated)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bundle's calibration made from samples imported on the exporting daemon still says so,
    /// and their source; one that daemon measured says the bundle alone; a long chain is cut.
    #[test]
    fn a_bundle_keeps_what_its_calibrations_were_made_from() {
        let bundle = "bundle from lab exported 2026-11-25T10:00:00+00:00";
        assert_eq!(
            bundled_source(bundle, Origin::Imported, "harness X on host Y"),
            format!("{bundle}; samples imported there: harness X on host Y")
        );
        assert_eq!(
            bundled_source(bundle, Origin::Builtin, "built-in suite"),
            bundle
        );
        let long = bundled_source(bundle, Origin::Bundle, &"é".repeat(400));
        assert!(
            long.len() <= 600 + '…'.len_utf8() && long.ends_with('…'),
            "{long}"
        );
        let forged = bundled_source(bundle, Origin::Imported, "run\n\u{1b}[2J");
        assert!(!forged.chars().any(char::is_control), "{forged:?}");
    }
}
