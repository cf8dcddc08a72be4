//! # wcetd: worst-case execution-time bounds for CUDA kernels, per SM partition size
//!
//! A long-running daemon measures kernels at a few partition sizes, fits scaling laws with
//! validated safety margins, and serves conservative bounds over D-Bus. Data flows one way, and
//! each layer knows only the one below it:
//!
//! ```text
//! gpu  ->  measure  ->  model  ->  store  ->  service  ->  dbus
//! ```
//!
//! - [`gpu`]: the device as the daemon sees it. The [`gpu::Gpu`] trait runs a kernel N times on a
//!   partition of m SMs and returns the times; [`gpu::sim`] is a physically motivated simulator
//!   (thread-block waves, bandwidth roofs, contention, heavy-tailed jitter, throttling) and
//!   [`gpu::cuda`] the real backend. Knows nothing of bounds.
//! - [`kernels`]: the catalogue of kernels (the built-in suite and users' [`manifest`]s) and their
//!   launch geometry.
//! - [`measure`]: a calibration campaign: warm-up, timed launches in batches, telemetry around
//!   each batch, every sample kept (compactly, [`launch_times`]), the conditions stamped. Which
//!   sizes to measure is passed in.
//! - [`model`]: from samples to bounds: scaling laws fitted with argmin, law choice and margin by
//!   leave-one-out validation, a peaks-over-threshold tail bound, the calibration planner, the
//!   published comparison methods, and the evaluation against held-out samples. Knows nothing of
//!   the GPU or the bus.
//! - [`sweep`]: every kernel at every size, for datasets and validation (`wcetctl campaign`).
//! - [`calibrate`]: the one place where measurement and model meet, for one kernel; what it
//!   makes is the store's [`store::KernelCalibration`], so it sits between store and service.
//! - [`store`]: calibrations on disk, one file per device fingerprint, written atomically. The
//!   launch times of what it loaded (and of what it saved) rest in an unlinked spill file, not
//!   in memory: nothing that serves a bound reads them.
//! - [`service`]: one GPU's state and job queue; queries read an immutable snapshot (an answer
//!   built from several lookups reads them all from one [`service::Moment`]), GPU work
//!   runs on its own worker thread, so one device's job never delays another's queries. No D-Bus
//!   types. [`bundle`] carries calibrations between hosts.
//! - [`dbus`]: the bus face, thin: an object per GPU forwarding to its service, maps errors to
//!   the design's names, turns service events into signals. [`access`] checks operators; [`bus`] finds or starts a bus.
//! - [`observe`] (production launch times: histograms, epochs, their file), the service's
//!   monitoring (`service/monitor.rs`: judging reports, floors under bounds), [`monitor_bus`]
//!   (`org.wcetd.Monitor1`), [`monitor_view`] (`wcetctl observed` and `watch`) and [`metrics`]
//!   (the Prometheus textfile for every GPU, a face of the services beside the bus): bounds that
//!   watch themselves.
//! - [`admission`] (pure analysis), [`admission_bus`] (`org.wcetd.Admission1`, where the service
//!   becomes admission's source of bounds) and [`taskset`] (task-set files): whether a task set
//!   fits, on distinct partitions or one shared partition. [`request_error`] is how a request
//!   fails, for the service and admission alike.
//! - [`client`], [`samples`], [`offline`]: typed bus clients, the CSV formats, and offline
//!   fitting and evaluation for `wcetctl`.
//! - [`config`] (the daemon's configuration file: the same keys as its flags) and [`generate`]
//!   (man pages and completions from the clap definitions) serve the binaries.
//! - [`log_throttle`]: log lines a flood could repeat, said at most every 10 s with a count.
//! - [`fnv`]: the project's one stable hash (file names, seeds, stamps), a leaf below everything;
//!   [`ptx_text`], the lexical shape of PTX (comments, entries, parameters, bodies), another.
//! - [`workload`]: static work of the known kernels (launch plans, PTX) for the predictions of
//!   [`model::predict`], which are reported beside bounds and never change one.
//!
//! The rule no layer may break: a bound is never below a sample observed at its size, whether
//! measured by the daemon or reported from production. A calibration's bound is made safe in
//! one place, `model::method::safety_chain`; as it is served it is only ever raised, in this
//! order (`Service::served_entry`, and `served_bound` on the hot path, which must agree):
//! scaled to the current SM clock; raised to the production floors (carried down from larger
//! sizes where the calibration says the kernel is never faster on fewer SMs); raised to what the
//! other interference vouches for (untagged: the other tag's bound as served; contended: the
//! isolated launches measured).

pub mod access;
pub mod admission;
pub mod admission_bus;
pub mod bundle;
pub mod bus;
pub mod calibrate;
pub mod client;
pub mod config;
pub mod dbus;
pub mod fnv;
pub mod generate;
pub mod gpu;
pub mod kernels;
pub mod launch_times;
pub mod log_throttle;
pub mod manifest;
pub mod measure;
pub mod metrics;
pub mod model;
pub mod monitor_bus;
pub mod monitor_view;
pub mod observe;
pub mod offline;
pub mod ptx_text;
pub mod request_error;
pub mod samples;
pub mod service;
pub mod store;
pub mod sweep;
pub mod taskset;
pub mod workload;
