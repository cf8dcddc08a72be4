//! Commands that run without a daemon: fitting, simulating, campaigns on a device
//! opened directly, evaluation against held-out samples, plots, and predictions.

use super::*;

/// [`Datasets`], read and checked.
pub(crate) struct Loaded {
    pub(crate) calibration: samples::SampleSet,
    pub(crate) held: samples::SampleSet,
    pub(crate) geometry: BTreeMap<String, Geometry>,
    pub(crate) sizes: CalibrationSizes,
}

impl Datasets {
    pub(crate) fn load(&self) -> anyhow::Result<Loaded> {
        let calibration = read_samples(&self.samples)?;
        let held = match &self.holdout {
            Some(p) => read_samples(p)?,
            None => calibration.clone(),
        };
        let sizes = calibration_sizes(&self.calibrate_at)?;
        if let CalibrationSizes::Fixed(asked) = &sizes {
            sizes_every_kernel_has(&calibration, asked, &self.samples)?;
        }
        Ok(Loaded {
            calibration,
            held,
            geometry: read_geometry(self.geometry.as_deref())?,
            sizes,
        })
    }
}

/// `--calibrate-at` sizes must be measured for every kernel of the file: a kernel without one
/// would be calibrated on fewer sizes than asked, and scored as if it had them all.
pub(crate) fn sizes_every_kernel_has(
    calibration: &samples::SampleSet,
    asked: &[u32],
    file: &Path,
) -> anyhow::Result<()> {
    let short: Vec<String> = calibration
        .iter()
        .filter_map(|(kernel, by_size)| {
            let missing: Vec<String> = asked
                .iter()
                .filter(|m| !by_size.contains_key(m))
                .map(u32::to_string)
                .collect();
            (!missing.is_empty()).then(|| format!("{kernel} (no {})", missing.join(", ")))
        })
        .collect();
    if short.is_empty() {
        return Ok(());
    }
    let common: Vec<String> = calibration
        .values()
        .map(|by_size| {
            by_size
                .keys()
                .copied()
                .collect::<std::collections::BTreeSet<u32>>()
        })
        .reduce(|a, b| &a & &b)
        .unwrap_or_default()
        .iter()
        .map(u32::to_string)
        .collect();
    bail!(
        "--calibrate-at: {} of {} kernels in {} have no samples at some asked size: {}; accepted: sizes every kernel has ({})",
        short.len(),
        calibration.len(),
        file.display(),
        short.join(", "),
        if common.is_empty() { "none".to_string() } else { common.join(", ") }
    )
}

/// `kernels check`: each file loaded as the daemon would load it.
pub(crate) fn check_manifests(
    json: bool,
    files: &[PathBuf],
    kernel_dirs: &[PathBuf],
) -> anyhow::Result<()> {
    let mut files = manifest_files(files, kernel_dirs)?;
    if files.is_empty() {
        bail!("no files given; accepted: one or more kernel manifest (.toml) paths, or --kernel-dir DIR");
    }
    // A file named twice (`a.toml` and `./a.toml` too) is one manifest, not two that take each
    // other's name.
    let mut seen = std::collections::HashSet::new();
    files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
    let checked = check_as_the_daemon_would(&files);
    let mut bad = 0;
    let mut out = Vec::new();
    for (file, result) in files.iter().zip(checked) {
        bad += usize::from(result.is_err());
        match (&result, json) {
            (Ok(m), false) => println!(
                "{}: ok: {} ({} of {}, {} blocks of {} threads, {} args)",
                file.display(),
                m.name,
                m.entry,
                m.module.display(),
                m.blocks(),
                m.threads_per_block(),
                m.args.len()
            ),
            (Err(why), false) => println!("{}: rejected: {why}", file.display()),
            (Ok(m), true) => {
                out.push(serde_json::json!({"file": file, "ok": true, "kernel": m.name}))
            }
            (Err(why), true) => {
                out.push(serde_json::json!({"file": file, "ok": false, "reason": why}))
            }
        }
    }
    if json {
        println!("{}", serde_json::Value::Array(out));
    }
    if bad > 0 {
        let why = format!("{bad} of {} manifest(s) rejected", files.len());
        return Err(Rejected(why).into());
    }
    Ok(())
}

/// The manifests `kernels check` is given: the `files` named, then each of `kernel_dirs`'
/// `.toml` files in name order, as the daemon reads a kernel directory.
fn manifest_files(files: &[PathBuf], kernel_dirs: &[PathBuf]) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = files.to_vec();
    for dir in kernel_dirs {
        let entries =
            std::fs::read_dir(dir).with_context(|| format!("reading {}", dir.display()))?;
        let mut in_dir: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        in_dir.sort();
        files.extend(in_dir);
    }
    Ok(files)
}

/// Each of `files`' manifests, or why the daemon would reject it. Each file alone, then the
/// names together as the daemon takes them: a built-in's name, or one an earlier file has, is
/// refused.
fn check_as_the_daemon_would(files: &[PathBuf]) -> Vec<Result<wcetd::manifest::Manifest, String>> {
    let loaded: Vec<Result<wcetd::manifest::Manifest, String>> = files
        .iter()
        .map(|f| {
            let m = wcetd::manifest::load(f)?;
            wcetd::gpu::sim::KernelPhysics::check_without_device(&m)
                .map_err(|e| format!("{e} (the daemon would reject it)"))?;
            Ok(m)
        })
        .collect();
    let (_, taken) = wcetd::kernels::Catalogue::with_manifests(
        loaded
            .iter()
            .filter_map(|r| r.as_ref().ok().cloned())
            .collect(),
    );
    files
        .iter()
        .zip(loaded)
        .map(|(file, result)| {
            let shown = file.display().to_string();
            match taken.iter().find(|(f, _)| *f == shown) {
                Some((_, why)) if result.is_ok() => Err(why.clone()),
                _ => result,
            }
        })
        .collect()
}

/// An input file, gzip-compressed when its name ends in `.gz` (as the recorded datasets are).
pub(crate) fn open_input(path: &Path) -> anyhow::Result<Box<dyn std::io::Read>> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let file = std::io::BufReader::new(file);
    Ok(if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    })
}

pub(crate) fn read_samples(path: &Path) -> anyhow::Result<samples::SampleSet> {
    samples::read_samples(open_input(path)?).with_context(|| format!("reading {}", path.display()))
}

/// The manifests of `dirs`, as the daemon loads them; any file rejected is an error here (an
/// offline run that silently left a kernel out would mislead).
fn manifests_in(dirs: &[PathBuf]) -> anyhow::Result<Vec<wcetd::manifest::Manifest>> {
    let (loaded, mut rejected) = wcetd::manifest::load_dirs(dirs);
    // As the daemon takes them: a built-in's name, or one an earlier file has, is refused.
    let (_, taken) = wcetd::kernels::Catalogue::with_manifests(loaded.clone());
    rejected.extend(taken);
    if let Some((file, why)) = rejected.first() {
        bail!("kernel manifest {file} rejected: {why}; check them with `wcetctl kernels check --kernel-dir DIR`");
    }
    Ok(loaded)
}

pub(crate) fn read_geometry(path: Option<&Path>) -> anyhow::Result<BTreeMap<String, Geometry>> {
    let Some(path) = path else {
        return Ok(BTreeMap::new());
    };
    samples::read_geometry(open_input(path)?).with_context(|| format!("reading {}", path.display()))
}

pub(crate) fn fit(
    json: bool,
    samples_path: &Path,
    (geometry, kernel_dirs): (Option<&Path>, &[PathBuf]),
    sizes: &[u32],
    (method, process_shift): (Method, Option<f64>),
) -> anyhow::Result<()> {
    if sizes.contains(&0) {
        bail!("--sizes contains 0; accepted: comma-separated SM counts, each at least 1");
    }
    let mut sizes = sizes.to_vec();
    sizes.sort_unstable();
    sizes.dedup();
    let set = read_samples(samples_path)?;
    let config = MethodConfig {
        process_shift: shift_in_effect(process_shift, samples_path),
        ..MethodConfig::default()
    };
    let mut geometry = read_geometry(geometry)?;
    for m in manifests_in(kernel_dirs)? {
        if let (false, Some(blocks_per_sm)) = (geometry.contains_key(&m.name), m.blocks_per_sm) {
            let blocks = m.blocks();
            geometry.insert(
                m.name.clone(),
                Geometry {
                    blocks,
                    blocks_per_sm,
                },
            );
        }
    }
    let (fits, refused) = offline::fit(&set, &geometry, &sizes, method, &config);
    say_what_fits_rest_on(&fits, &geometry);
    if json {
        println!(
            "{}",
            serde_json::to_string_pretty(&offline::fit_json(&fits, &refused))?
        );
    } else if !fits.is_empty() || refused.is_empty() {
        // With nothing bounded, no CSV header alone, which a reader would take for no kernels.
        print!("{}", offline::bounds_csv(&fits));
    }
    for r in &refused {
        eprintln!("wcetctl: refused: {}", r.why);
    }
    match (refused.len(), fits.len()) {
        (0, _) => {}
        (n, 0) => bail!(
            "fitting {}: no kernel could be bounded ({n} refused, above)",
            samples_path.display()
        ),
        (n, k) => bail!(
            "fitting {}: {n} of {} kernels refused (above); the bounds of the other {k} are printed",
            samples_path.display(),
            n + k
        ),
    }
    Ok(())
}

/// The sizes of `f`'s bounds whose entry satisfies `pick`, as text.
fn sizes_where(
    f: &offline::KernelFit,
    pick: impl Fn(&wcetd::model::BoundEntry) -> bool,
) -> Vec<String> {
    f.table
        .entries
        .iter()
        .filter(|e| pick(e))
        .map(|e| e.sms.to_string())
        .collect()
}

/// What each kernel's samples support, on standard error so the CSV stays clean.
fn say_what_fits_rest_on(fits: &[offline::KernelFit], geometry: &BTreeMap<String, Geometry>) {
    for f in fits {
        eprintln!(
            "wcetctl: {}: bounds stated at exceedance {:.1e} per launch ({}, {} samples)",
            f.kernel,
            f.exceedance,
            f.basis.as_str(),
            f.samples.values().sum::<usize>()
        );
        // Rule 2: every bound says where it came from; the CSV has no column for it.
        for provenance in ["fitted", "extrapolated"] {
            let at = sizes_where(f, |e| e.provenance.to_string() == provenance);
            if !at.is_empty() {
                eprintln!(
                    "wcetctl: {}: {provenance} (not measured) at {} SMs",
                    f.kernel,
                    at.join(", ")
                );
            }
        }
        for w in &f.warnings {
            eprintln!("wcetctl: warning: {}: {w}", f.kernel);
        }
        let smallest = f.samples.keys().min().copied().unwrap_or(0);
        let below = sizes_where(f, |e| e.sms < smallest);
        if !below.is_empty() {
            eprintln!(
                "wcetctl: warning: {}: at {} SMs, below the smallest size measured ({smallest}), the bound assumes each SM does the same work per unit as there (no cache or occupancy change on fewer SMs); measure the smallest size it will run at",
                f.kernel,
                below.join(", ")
            );
        }
        let largest = f.samples.keys().max().copied().unwrap_or(0);
        let above = sizes_where(f, |e| e.sms > largest);
        if !above.is_empty() {
            eprintln!(
                "wcetctl: warning: {}: at {} SMs, above the largest size measured ({largest}), nothing measured bounds the time (contention can start past it); measure the largest size it will run at",
                f.kernel,
                above.join(", ")
            );
        }
        if !geometry.contains_key(&f.kernel) {
            eprintln!(
                "wcetctl: warning: {}: no launch geometry (--geometry, `kernel,blocks,blocks_per_sm`, or --kernel-dir with a manifest that gives `blocks_per_sm`, which the daemon measures on a GPU and nothing offline can): no law sees wave steps between measured sizes, so none is used there and the bound between two sizes rests on the measured neighbours (looser)",
                f.kernel
            );
        }
    }
}

pub(crate) fn simulate(
    json: bool,
    profile: &str,
    (seed, launches, contended): (u64, u32, bool),
    geometry_out: Option<&Path>,
    kernel_dirs: &[PathBuf],
) -> anyhow::Result<()> {
    let tag = if contended {
        Interference::Contended
    } else {
        Interference::Isolated
    };
    let manifests = manifests_in(kernel_dirs)?;
    let profile = DeviceProfile::load(profile)?;
    // The geometry goes to a temporary file beside its path, made first: a directory that
    // cannot be written fails before any sample is printed. It is written once the geometry is
    // known, after the samples, and renamed over the path only then: a run that fails leaves
    // the path as it was (truncating it first, a review found, left it empty).
    let geometry_file = geometry_out
        .map(|path| {
            let dir = match path.parent() {
                Some(d) if !d.as_os_str().is_empty() => d,
                _ => Path::new("."),
            };
            tempfile::NamedTempFile::new_in(dir)
                .map(|f| (f, path))
                .with_context(|| format!("writing {}", path.display()))
        })
        .transpose()?;
    let run = (seed, launches);
    let geometry = if json {
        // The samples themselves: {kernel: {sms: [time_ns, ...]}}, launch order kept; JSON is
        // one document, so this run is held in memory.
        let mut set = samples::SampleSet::new();
        let geometry = offline::simulate(&profile, &manifests, run, tag, &mut |k, m, t| {
            let times = set.entry(k.to_string()).or_default().entry(m).or_default();
            times.extend_from_slice(t);
            Ok(())
        })?;
        println!(
            "{}",
            serde_json::json!({"interference": tag.to_string(), "samples": set})
        );
        geometry
    } else {
        let mut out = samples::SamplesWriter::new(std::io::stdout().lock())?;
        let geometry = offline::simulate(&profile, &manifests, run, tag, &mut |k, m, t| {
            Ok(out.write(k, m, t)?)
        })?;
        out.finish()?;
        geometry
    };
    if let Some((mut file, path)) = geometry_file {
        use std::io::Write;
        let mut text = String::from("kernel,blocks,blocks_per_sm\n");
        for (k, g) in geometry {
            text.push_str(&format!("{k},{},{}\n", g.blocks, g.blocks_per_sm));
        }
        // Readable as a file written plainly would be (a temporary file is its owner's alone).
        use std::os::unix::fs::PermissionsExt;
        let readable = std::fs::Permissions::from_mode(0o644);
        file.write_all(text.as_bytes())
            .and_then(|()| file.as_file().set_permissions(readable))
            .and_then(|()| file.as_file().sync_all())
            .with_context(|| format!("writing {}", path.display()))?;
        file.persist(path)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

pub(crate) fn campaign(
    json: bool,
    device: &DeviceArgs,
    settings: &wcetd::sweep::SweepSettings,
    names: &[String],
    (delay_probe, probe_sizes): (u32, &[u32]),
    out: &Path,
) -> anyhow::Result<()> {
    let kernels = chosen_kernels(names)?;
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let mut gpu = device.open()?;
    let bar = indicatif::ProgressBar::new(1);
    bar.set_style(
        indicatif::ProgressStyle::with_template(
            "{msg:32} [{bar:30}] {pos}/{len} launches, ETA {eta}",
        )
        .expect("static template"),
    );
    let sweep = wcetd::sweep::run(
        gpu.as_mut(),
        &kernels,
        settings,
        &mut |done, total, what| {
            bar.set_length(total);
            bar.set_position(done);
            bar.set_message(what.to_string());
        },
    )?;
    bar.finish_and_clear();
    if delay_probe > 0 {
        write_delay_probes(gpu.as_mut(), delay_probe, probe_sizes, out)?;
    }
    write_sweep(&sweep, settings, out)?;
    eprintln!(
        "wcetctl: {} launches of {} kernels on {} ({}), written to {}",
        sweep.rows.len(),
        kernels.len(),
        sweep.stamp.gpu,
        sweep.stamp.backend,
        out.display()
    );
    if json {
        println!(
            "{}",
            serde_json::json!({"launches": sweep.rows.len(), "kernels": kernels.iter().map(|k| k.name.clone()).collect::<Vec<_>>(),
                "out": out.display().to_string(), "stamp": sweep.stamp})
        );
    }
    Ok(())
}

/// The built-in kernels named (all of them when none is), or which name is unknown.
pub(crate) fn chosen_kernels(names: &[String]) -> anyhow::Result<Vec<wcetd::kernels::KernelSpec>> {
    let suite = wcetd::kernels::builtin_suite();
    if names.is_empty() {
        return Ok(suite);
    }
    names
        .iter()
        .map(|n| {
            suite
                .iter()
                .find(|k| k.name == *n)
                .cloned()
                .with_context(|| {
                    format!(
                        "unknown kernel `{n}`; accepted: {}",
                        wcetd::kernels::BUILTIN_NAMES.join(", ")
                    )
                })
        })
        .collect()
}

/// `launches` launches of the delay probe at each of `sizes` (the whole device when none),
/// one CSV each: `delays.csv` for the whole device, `delays-<sms>.csv` for a partition.
pub(crate) fn write_delay_probes(
    gpu: &mut dyn wcetd::gpu::Gpu,
    launches: u32,
    sizes: &[u32],
    out: &Path,
) -> anyhow::Result<()> {
    let whole = gpu.info().total_sms;
    let sizes = if sizes.is_empty() {
        vec![whole]
    } else {
        sizes.to_vec()
    };
    for sms in sizes {
        let times = gpu.delay_probe(sms, launches)?;
        let mut text = String::from("time_ns\n");
        for t in times {
            text.push_str(&format!("{t}\n"));
        }
        let name = if sms == whole {
            "delays.csv".into()
        } else {
            format!("delays-{sms}.csv")
        };
        std::fs::write(out.join(name), text)?;
    }
    Ok(())
}

/// A sweep's samples (one CSV per interference), geometry and stamp, under `out`.
pub(crate) fn write_sweep(
    sweep: &wcetd::sweep::Sweep,
    settings: &wcetd::sweep::SweepSettings,
    out: &Path,
) -> anyhow::Result<()> {
    for &tag in &settings.interference {
        let path = out.join(format!("samples-{tag}.csv"));
        let file =
            std::fs::File::create(&path).with_context(|| format!("writing {}", path.display()))?;
        wcetd::sweep::write_rows(std::io::BufWriter::new(file), &sweep.rows, tag)?;
    }
    let mut geometry = String::from("kernel,blocks,blocks_per_sm\n");
    for (k, g) in &sweep.geometry {
        geometry.push_str(&format!("{k},{},{}\n", g.blocks, g.blocks_per_sm));
    }
    std::fs::write(out.join("geometry.csv"), geometry)?;
    std::fs::write(
        out.join("stamp.json"),
        serde_json::to_string_pretty(&sweep.stamp)? + "\n",
    )?;
    Ok(())
}

pub(crate) fn probe(json: bool, device: &DeviceArgs) -> anyhow::Result<()> {
    let gpu = device.open()?;
    let reports = gpu.placement();
    if json {
        println!("{}", serde_json::to_string_pretty(reports)?);
        return Ok(());
    }
    if reports.is_empty() {
        println!("{}: no placement to probe on this backend", gpu.info().name);
        return Ok(());
    }
    println!(
        "{:>5} {:>7} {:>9} {:>10}  result",
        "asked", "granted", "rest", "ran on"
    );
    for r in reports {
        println!(
            "{:>5} {:>7} {:>9} {:>10}  {}",
            r.requested_sms,
            r.granted_sms,
            r.rest_sms,
            format!("{}+{}", r.sm_ids.len(), r.rest_ids.len()),
            r.problem()
                .unwrap_or_else(|| "disjoint and complete".into())
        );
    }
    Ok(())
}

/// The method's configuration, with the device's rare delays and sustained slowdowns when a
/// delay-probe file is given.
pub(crate) fn method_config(delays: Option<&Path>) -> anyhow::Result<MethodConfig> {
    let mut config = MethodConfig::default();
    let Some(path) = delays else {
        return Ok(config);
    };
    let times = wcetd::samples::read_times(open_input(path)?)
        .with_context(|| format!("{}", path.display()))?;
    if let Some(found) = wcetd::model::throttle::sustained_slowdown([times.as_slice()]) {
        eprintln!("wcetctl: delay probe: {}", found.note());
        config.device_slowdown = found.depth;
        config.device_slowdown_share = found.share;
    }
    let times = wcetd::model::throttle::without_runs(&times);
    if let Some(d) = wcetd::model::tail::device_delay(&times, config.exceedance) {
        eprintln!("wcetctl: {}", d.note);
        config.device_delay_ns = d.ns;
        config.device_delay_exceedance = d.exceedance;
    }
    Ok(config)
}

impl Datasets {
    /// The method's configuration as the daemon would have it on the device the samples were
    /// recorded on: the delay probe's findings, and the process shift.
    fn method_config(&self) -> anyhow::Result<MethodConfig> {
        let mut config = method_config(self.delays.as_deref())?;
        config.process_shift = shift_in_effect(self.process_shift, &self.samples);
        Ok(config)
    }
}

/// `given`, else the daemon's default for the device `samples` were recorded on, said on
/// standard error as the delay probe's findings are (a dataset copied away from its stamp.json
/// gets 0, and the line shows it).
fn shift_in_effect(given: Option<f64>, samples: &Path) -> f64 {
    let (shift, why) = match given {
        Some(s) => (s, "as given"),
        None if recorded_on_a_gpu(samples) => (
            wcetd::model::CUDA_PROCESS_SHIFT,
            "the samples' stamp.json says a real GPU",
        ),
        None => (
            0.0,
            "no stamp.json beside the samples says they are from a real GPU",
        ),
    };
    eprintln!(
        "wcetctl: typical time in another process allowed {:.1}% higher ({why})",
        shift * 100.0
    );
    shift
}

/// Whether the stamp.json beside `samples` says they were recorded with the CUDA backend.
fn recorded_on_a_gpu(samples: &Path) -> bool {
    let stamp = samples.with_file_name("stamp.json");
    std::fs::read_to_string(stamp)
        .ok()
        .and_then(|text| serde_json::from_str::<serde_json::Value>(&text).ok())
        .is_some_and(|v| v["backend"].as_str() == Some("cuda"))
}

pub(crate) fn evaluate(
    json: bool,
    data: &Datasets,
    methods: &[Method],
    plot_dir: Option<&Path>,
    budget: SampleBudget,
) -> anyhow::Result<()> {
    let methods = if methods.is_empty() {
        Method::ALL.to_vec()
    } else {
        methods_once(methods)?
    };
    let Loaded {
        calibration,
        held,
        geometry,
        sizes,
    } = data.load()?;
    if !calibration.keys().any(|k| held.contains_key(k)) {
        bail!(
            "the held-out samples share no kernel with the calibration samples (held out: {}); accepted: held-out launches of the kernels being calibrated",
            held.keys().cloned().collect::<Vec<_>>().join(", ")
        );
    }
    for warning in held_out_overlap(data, &calibration, &held) {
        eprintln!("wcetctl: warning: {warning}");
    }
    let config = data.method_config()?;
    let evals = offline::evaluate_all(
        &calibration,
        &held,
        &geometry,
        &sizes,
        &methods,
        &config,
        budget,
    );
    if let Some(dir) = plot_dir {
        plot_evaluations(dir, &calibration, &held, &evals)?;
    }
    let pooled = offline::pooled(&evals, &methods);
    if json {
        let overall: Vec<_> = pooled
            .iter()
            .map(|(m, s, f)| serde_json::json!({"method": m, "score": s, "failed_kernels": f}))
            .collect();
        println!(
            "{}",
            serde_json::to_string_pretty(
                &serde_json::json!({"kernels": evals, "overall": overall})
            )?
        );
        return Ok(());
    }
    print_evaluations(&evals, &pooled);
    nothing_failed_silently(&evals)
}

/// `--methods` with each method once: one named twice was scored twice and counted twice in its
/// `ALL` row (a hunt).
fn methods_once(methods: &[Method]) -> anyhow::Result<Vec<Method>> {
    for (i, m) in methods.iter().enumerate() {
        if methods[..i].contains(m) {
            bail!(
                "--methods: `{}` is named twice; accepted: each method once, of {}",
                m.name(),
                Method::ALL
                    .iter()
                    .map(|m| m.name())
                    .collect::<Vec<_>>()
                    .join(", ")
            );
        }
    }
    Ok(methods.to_vec())
}

/// Launches shared by at least this many leading samples of a size are taken as the same runs.
const SAME_RUNS: usize = 30;

/// What `evaluate` says when its held-out samples are not held out: none given (the calibration
/// file scores itself), or, for some kernels, held-out samples at a size that hold the first
/// [`SAME_RUNS`] calibration launch times there in a row (the same runs, copied or concatenated;
/// a hunt found such a file scored as held out without a word).
fn held_out_overlap(
    data: &Datasets,
    calibration: &samples::SampleSet,
    held: &samples::SampleSet,
) -> Vec<String> {
    if data.holdout.is_none() {
        return vec!["no --holdout: the calibration samples score themselves, the launches calibrated on included (in-sample); pass fresh runs with --holdout for held-out scores".into()];
    }
    let same: Vec<String> = calibration
        .iter()
        .filter_map(|(kernel, by_size)| {
            let sizes: Vec<String> = by_size
                .iter()
                .filter(|(m, cal)| {
                    held.get(kernel.as_str())
                        .and_then(|h| h.get(*m))
                        .is_some_and(|h| {
                            // Times that never vary would match any run of the same time.
                            let first = cal.get(..SAME_RUNS);
                            first.is_some_and(|f| f.iter().any(|t| *t != f[0]))
                                && h.windows(SAME_RUNS).any(|w| Some(w) == first)
                        })
                })
                .map(|(m, _)| m.to_string())
                .collect();
            match sizes.len() {
                0 => None,
                n if n == by_size.len() => Some(format!("{kernel} (every size)")),
                _ => Some(format!("{kernel} at {} SMs", sizes.join(", "))),
            }
        })
        .collect();
    if same.is_empty() {
        return Vec::new();
    }
    vec![format!(
        "held-out samples that hold the calibration samples' first {SAME_RUNS} launch times in a row (the same runs, not held out): {}; their scores are in-sample",
        same.join("; ")
    )]
}

/// `evaluate --plot DIR`: one `KERNEL.svg` for each kernel both sample files have.
fn plot_evaluations(
    dir: &Path,
    calibration: &samples::SampleSet,
    held: &samples::SampleSet,
    evals: &[wcetd::model::evaluate::KernelEvaluation],
) -> anyhow::Result<()> {
    // Named, with what failed: "File exists (os error 17)" said neither (a hunt found it).
    std::fs::create_dir_all(dir)
        .with_context(|| format!("--plot: creating the directory {}", dir.display()))?;
    for kernel in calibration.keys().filter(|k| held.contains_key(*k)) {
        let mine: Vec<_> = evals.iter().filter(|e| &e.kernel == kernel).collect();
        let file = dir.join(format!("{kernel}.svg"));
        offline::plot(kernel, &held[kernel], &mine, &file)
            .with_context(|| format!("--plot: writing {}", file.display()))?;
    }
    Ok(())
}

/// `evaluate`'s table: each (kernel, method) scored, then each method pooled over the kernels
/// (`ALL`); after it, why a method made no bounds, and the sizes each kernel was calibrated at.
fn print_evaluations(
    evals: &[wcetd::model::evaluate::KernelEvaluation],
    pooled: &[(Method, wcetd::model::evaluate::Score, usize)],
) {
    let mut rows: Vec<_> = evals
        .iter()
        .map(|e| (e.kernel.clone(), e.method, e.score.clone()))
        .collect();
    rows.extend(
        pooled
            .iter()
            .map(|(m, s, _)| ("ALL".to_string(), *m, s.clone())),
    );
    print!("{}", offline::score_table(&rows));
    for e in evals.iter().filter(|e| e.error.is_some()) {
        println!(
            "note: {} / {}: {}",
            e.kernel,
            e.method,
            e.error.as_deref().unwrap_or("")
        );
    }
    for (m, _, failed) in pooled.iter().filter(|(_, _, f)| *f > 0) {
        let kernels = evals.iter().filter(|e| e.method == *m).count();
        println!(
            "note: ALL / {m}: pooled over the {} of {kernels} kernels it made bounds for",
            kernels - failed
        );
    }
    let mut seen = Vec::new();
    for e in evals {
        if !seen.contains(&e.kernel) {
            println!("calibrated {} at {:?}", e.kernel, e.calibrated_at);
            seen.push(e.kernel.clone());
        }
    }
}

/// A run in which some method made no bounds for a kernel says so on standard error, and one in
/// which no method made any fails (exit 2): their rows score 0 sizes and 0 violations, which
/// read like a perfect result (the notes beside the table say why).
fn nothing_failed_silently(
    evals: &[wcetd::model::evaluate::KernelEvaluation],
) -> anyhow::Result<()> {
    let failed = evals.iter().filter(|e| e.error.is_some()).count();
    if failed == evals.len() {
        bail!("no method made bounds for any kernel ({failed} failed; the notes above say why)");
    }
    if failed > 0 {
        eprintln!(
            "wcetctl: {failed} of {} (kernel, method) evaluations made no bounds; their rows score nothing (the notes say why)",
            evals.len()
        );
    }
    Ok(())
}

/// One plot per kernel: into a directory (`KERNEL.svg` each), or one file for one kernel.
pub(crate) fn plot(
    json: bool,
    kernels: &[String],
    data: &Datasets,
    out: &Path,
) -> anyhow::Result<()> {
    let loaded = data.load()?;
    let chosen = kernels_to_plot(kernels, &loaded)?;
    let single_file = match offline::PlotFormat::of(out) {
        Some(format) => {
            format.check()?;
            if chosen.len() != 1 {
                bail!(
                    "-o {} is one file but {} kernels are to be plotted; accepted: a directory (one KERNEL.svg each), or one kernel",
                    out.display(),
                    chosen.len()
                );
            }
            true
        }
        None => {
            std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
            false
        }
    };
    let config = data.method_config()?;
    let mut written = Vec::new();
    for kernel in &chosen {
        let path = if single_file {
            out.to_path_buf()
        } else {
            out.join(format!("{kernel}.svg"))
        };
        plot_kernel(kernel, &loaded, &config, &path)?;
        written.push(path.display().to_string());
    }
    if json {
        println!("{}", serde_json::json!({"written": written}));
    } else {
        written.iter().for_each(|p| println!("wrote {p}"));
    }
    Ok(())
}

/// The kernels `plot` draws: those asked for (every one when none is), each of which both
/// sample files must have.
fn kernels_to_plot(kernels: &[String], loaded: &Loaded) -> anyhow::Result<Vec<String>> {
    let both: Vec<String> = loaded
        .calibration
        .keys()
        .filter(|k| loaded.held.contains_key(*k))
        .cloned()
        .collect();
    let chosen: Vec<String> = if kernels.is_empty() {
        both.clone()
    } else {
        kernels.to_vec()
    };
    if let Some(k) = chosen.iter().find(|k| !both.contains(k)) {
        bail!(
            "kernel `{k}` is not in both sample files; accepted: {}",
            both.join(", ")
        );
    }
    Ok(chosen)
}

/// Plot `kernel` to `path`: every method calibrated on its samples alone and scored on its
/// held-out ones; a method that made no bounds is said on standard error and left out.
fn plot_kernel(
    kernel: &str,
    loaded: &Loaded,
    config: &MethodConfig,
    path: &Path,
) -> anyhow::Result<()> {
    let single: samples::SampleSet =
        [(kernel.to_string(), loaded.calibration[kernel].clone())].into();
    let evals = offline::evaluate_all(
        &single,
        &loaded.held,
        &loaded.geometry,
        &loaded.sizes,
        &Method::ALL,
        config,
        SampleBudget::default(),
    );
    for e in evals.iter().filter(|e| e.error.is_some()) {
        eprintln!(
            "wcetctl: {kernel} / {}: made no bounds: {}",
            e.method,
            e.error.as_deref().unwrap_or("")
        );
    }
    let refs: Vec<_> = evals.iter().collect();
    offline::plot(kernel, &loaded.held[kernel], &refs, path)
}

pub(crate) fn project(
    json: bool,
    source: &Path,
    target: &str,
    configs: Option<&Path>,
) -> anyhow::Result<()> {
    use wcetd::model::predict::{self, runs};
    let runs = runs::read_runs_file(source)?;
    let target = predict::device::load(target)?;
    let configs = match configs {
        Some(p) => runs::read_configs_file(p)?,
        None => runs.iter().map(|r| r.config.clone()).collect(),
    };
    let rows = predict::project(&runs, &target, &configs)
        .with_context(|| format!("learning from {}", source.display()))?;
    let mut unseen: Vec<&str> = rows
        .iter()
        .filter(|(_, _, b)| *b == predict::Basis::Static)
        .map(|(c, _, _)| c.kernel.as_str())
        .collect();
    unseen.dedup();
    if !unseen.is_empty() {
        eprintln!(
            "note: no runs of {} in {}: predicted from their static counts alone",
            unseen.join(", "),
            source.display()
        );
    }
    if json {
        let v = projection_json(&rows, source, &target.name);
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        print!("{}", predict::projection_csv(&rows));
    }
    Ok(())
}

/// `project`'s rows as JSON, each labelled as `predict` labels its curve: `basis` says what the
/// prediction was made from (`runs`: the kernel's own runs in `source`; `static`: its static
/// counts alone) and `prediction` that it is a prediction, never a bound. (`basis` once read
/// `measured`, which in `GetBoundInfo` names a measured bound.)
fn projection_json(
    rows: &[(
        wcetd::model::predict::Config,
        f64,
        wcetd::model::predict::Basis,
    )],
    source: &Path,
    target: &str,
) -> Vec<serde_json::Value> {
    use wcetd::model::predict::Basis;
    rows.iter()
        .map(|(c, ms, basis)| {
            let (basis, from) = match basis {
                Basis::Measured => ("runs", format!("its runs in {}", source.display())),
                Basis::Static => (
                    "static",
                    format!("its static counts alone (no runs in {})", source.display()),
                ),
            };
            let label =
                format!("a prediction of the typical time, never a bound: on {target} from {from}");
            serde_json::json!({"kernel": c.kernel, "N": c.n, "rows": c.rows, "cols": c.cols,
                "predicted_ms": ms, "basis": basis, "prediction": label})
        })
        .collect()
}

pub(crate) fn predict(json: bool, kernel: &str, device: &str, sizes: &[u32]) -> anyhow::Result<()> {
    let d = wcetd::model::predict::device::load(device)?;
    let (kernel, work) = if kernel.ends_with(".toml") {
        let path = Path::new(kernel);
        let m = wcetd::manifest::load(path)
            .map_err(|e| anyhow::anyhow!("manifest {}: {e}", path.display()))?;
        (m.name.clone(), wcetd::workload::from_manifest(&m)?)
    } else {
        let work = wcetd::workload::builtin(kernel).context(
            "give a built-in kernel's name or a manifest's path (a file ending in .toml)",
        )?;
        (kernel.to_string(), work)
    };
    let sizes: Vec<u32> = if sizes.is_empty() {
        (1..=d.sms / 2).map(|t| 2 * t).chain([d.sms]).collect()
    } else if sizes.contains(&0) {
        bail!("--sizes contains 0; accepted: comma-separated SM counts, each at least 1");
    } else if let Some(m) = sizes.iter().find(|&&m| m > d.sms) {
        bail!(
            "--sizes {m}: {} has {} SMs; accepted: at most {}",
            d.name,
            d.sms,
            d.sms
        );
    } else {
        sizes.to_vec()
    };
    let curve = wcetd::model::predict::partition_curve(&work, &d, &sizes);
    let label = format!(
        "a prediction of the typical time, never a bound: roofline on {} from the {}",
        d.name, work.basis
    );
    print_prediction(json, &kernel, &curve, &label, &work.basis)
}

/// A predicted curve, its label and its knee, as `wcetctl predict` prints them.
pub(crate) fn print_prediction(
    json: bool,
    kernel: &str,
    curve: &wcetd::model::predict::PredictedCurve,
    label: &str,
    basis: &str,
) -> anyhow::Result<()> {
    // A time u64 cannot hold would print as 18446744073709551615 ns, which reads as a prediction.
    if let Some((m, t)) = curve
        .points
        .iter()
        .find(|(_, t)| !(t.is_finite() && *t < u64::MAX as f64))
    {
        bail!(
            "{kernel} on {}: the predicted time at {m} SMs is {t:e} ns, beyond what can be stated (at most {} ns, about 584 years); accepted: a device description whose rates give times in that range",
            curve.device,
            u64::MAX - 1
        );
    }
    if json {
        let points: Vec<(u32, u64)> = curve
            .points
            .iter()
            .map(|&(m, t)| (m, t.round() as u64))
            .collect();
        println!(
            "{}",
            serde_json::json!({"kernel": kernel, "device": curve.device, "basis": basis,
                "prediction": label, "knee_sms": curve.knee(), "predicted_typical_ns": points})
        );
        return Ok(());
    }
    println!("{kernel} on {}\n{label}", curve.device);
    println!("{:>5}  {:>20}", "SMs", "predicted_typical_ns");
    for (m, t) in &curve.points {
        println!("{m:>5}  {:>20}", t.round() as u64);
    }
    if let Some(k) = curve.knee() {
        println!("knee: {k} SMs (within 5% of the largest size shown)");
    }
    Ok(())
}

pub(crate) fn prediction_study(
    json: bool,
    data: &Path,
    devices: &Path,
    as_labelled: bool,
    rows: bool,
    l2_over_dram: Option<f64>,
) -> anyhow::Result<()> {
    use wcetd::model::predict::{runs, study, DeviceDescription};
    let a = runs::read_runs_file(&data.join("runs_4070.csv"))?;
    let b = runs::read_runs_file(&data.join("runs_titanx.csv"))?;
    let mut da = DeviceDescription::load(&devices.join("rtx4070.toml"))?;
    let mut db = DeviceDescription::load(&devices.join("titanx.toml"))?;
    if let Some(x) = l2_over_dram {
        if !(x.is_finite() && x > 0.0) {
            bail!("--l2-over-dram {x}; accepted: a positive multiple of the DRAM bandwidth");
        }
        for d in [&mut da, &mut db] {
            d.l2_bandwidth_gbps = Some(x * d.mem_bandwidth_gbps);
        }
    }
    let outcomes = study::run_all((&a, &da), (&b, &db), !as_labelled)?;
    if json {
        let v: Vec<_> = outcomes
            .iter()
            .map(|o| serde_json::json!({"experiment": o.experiment, "rows": o.rows.len(), "wcetd": o.wcetd(), "roofline": o.roofline()}))
            .collect();
        println!("{}", serde_json::to_string_pretty(&v)?);
        return Ok(());
    }
    print!("{}", study::report(&outcomes, rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    /// A time u64 cannot hold is refused, not printed as 18446744073709551615 ns.
    #[test]
    fn a_prediction_past_u64_is_refused() {
        let curve = wcetd::model::predict::PredictedCurve {
            device: "d".into(),
            points: vec![(1, 1e30), (2, 5.0)],
        };
        let e = super::print_prediction(true, "k", &curve, "label", "basis")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("at 1 SMs is 1e30 ns") && e.contains("accepted"),
            "{e}"
        );
    }
}
