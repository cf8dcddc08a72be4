//! Kernel manifests: a user's own kernel, described in one TOML file (the format is in
//! `docs/kernels.md`): the module (.ptx, .cubin, .fatbin or .cu), its entry point, the launch
//! geometry, the arguments (device buffers with a fill, or scalars), an optional output check,
//! and an optional `[sim]` table the simulated GPU uses instead of running the module.
//!
//! Everything here is checked without a GPU: the file parses with no unknown key, every number is
//! in range, the module exists and (where it can be read) defines the entry point, and a PTX
//! entry's parameter list matches `args`. A manifest that fails any check is rejected whole, with
//! its path and the reason (line and key where TOML gives them); nothing of it is used.

use std::path::{Path, PathBuf};

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// A kernel manifest, checked and with its module read.
#[derive(Debug, Clone, PartialEq)]
pub struct Manifest {
    /// The manifest file.
    pub path: PathBuf,
    pub name: String,
    pub summary: String,
    /// The module file, resolved against the manifest's directory.
    pub module: PathBuf,
    pub module_kind: ModuleKind,
    /// SHA-256 of the module's bytes, hex: a changed module is a different kernel to the caches.
    pub module_sha256: String,
    /// SHA-256 of everything that decides what is timed: the manifest's text, the module's bytes
    /// and the bytes of every fill file (hex). A calibration records it; a kernel whose code no
    /// longer matches is served stale until it is recalibrated.
    pub code_sha256: String,
    /// SHA-256 of the module's and fill files' bytes alone (hex): what [`Manifest::changed_on_disk`]
    /// compares, since those files are read again when the kernel is timed.
    pub inputs_sha256: String,
    pub entry: String,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub blocks_per_sm: Option<u32>,
    pub args: Vec<Arg>,
    pub check: Option<OutputCheck>,
    /// The `[sim]` table, parsed by the simulated GPU.
    pub sim: Option<toml::Table>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModuleKind {
    Ptx,
    Cubin,
    Fatbin,
    /// CUDA C, compiled with NVRTC.
    Cu,
}

/// One kernel argument, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    /// A device allocation of `bytes`, filled before timing.
    Buffer {
        bytes: u64,
        fill: Fill,
    },
    I32(i32),
    U32(u32),
    I64(i64),
    U64(u64),
    F32(f32),
    F64(f64),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Fill {
    Zero,
    /// Uniform in [0, 1), seeded from the kernel's name: every run sees the same input.
    RandomF32,
    RandomU32,
    /// The file's bytes, then zeros.
    File(PathBuf),
}

/// What the output must be after one launch on freshly filled buffers.
#[derive(Debug, Clone, PartialEq)]
pub enum OutputCheck {
    Sha256 {
        buffer: usize,
        sha256: String,
    },
    /// Compared as f32 values: `|got - want| <= tolerance * max(1, |want|)`.
    Reference {
        buffer: usize,
        file: PathBuf,
        tolerance: f32,
    },
}

impl Manifest {
    /// Why the module or a fill file on disk is no longer what this manifest was loaded with,
    /// if it is not. Those files are read again whenever the kernel is timed, so a calibration
    /// made after such a change would time other code under this manifest's digest: a caller
    /// refuses to time it (or to keep it at a reload) until the manifest is loaded again.
    pub fn changed_on_disk(&self) -> Option<String> {
        match self.on_disk() {
            OnDisk::Same => None,
            OnDisk::Unreadable(why) | OnDisk::Changed(why) => Some(why),
        }
    }

    /// [`Manifest::changed_on_disk`], telling files that cannot be read now (an unreadable
    /// directory, a mount gone) from files read and found other than those loaded.
    pub fn on_disk(&self) -> OnDisk {
        if let Some(grown) = self.fill_grown_past_its_buffer() {
            return OnDisk::Changed(grown);
        }
        let module = match read_module(&self.module) {
            Ok(bytes) => bytes,
            Err(e) => return OnDisk::Unreadable(format!("the {e} (of `{}`)", self.name)),
        };
        let inputs = match code_digests("", &module, &self.args) {
            Ok((_, inputs)) => inputs,
            Err(e) => return OnDisk::Unreadable(format!("the {e} (of `{}`)", self.name)),
        };
        if inputs == self.inputs_sha256 {
            return OnDisk::Same;
        }
        // Only the module's own digest is kept apart, so with it unchanged a fill file changed.
        let what = if hex(&Sha256::digest(&module)) != self.module_sha256 {
            format!("the module {}", self.module.display())
        } else {
            let fills: Vec<String> = self.input_files()[1..]
                .iter()
                .map(|p| p.display().to_string())
                .collect();
            match fills.as_slice() {
                [one] => format!("the fill file {one}"),
                all => format!("one of the fill files {}", all.join(", ")),
            }
        };
        OnDisk::Changed(format!(
            "{what} of `{}` changed since it was loaded",
            self.name
        ))
    }

    /// Why a fill file is now longer than its buffer, if one is: it was not when it was loaded,
    /// so it changed. (Taken as a file that cannot be read, as its reading fails, the previous
    /// version was kept at a reload, and `Health` advised making it readable again; a black-box
    /// hunt found it.)
    fn fill_grown_past_its_buffer(&self) -> Option<String> {
        self.args.iter().find_map(|a| {
            let Arg::Buffer {
                fill: Fill::File(path),
                bytes,
            } = a
            else {
                return None;
            };
            let len = std::fs::metadata(path).ok()?.len();
            (len > *bytes).then(|| {
                format!(
                    "the fill file {} of `{}` changed since it was loaded: it has {len} bytes, more than its buffer's {bytes}",
                    path.display(),
                    self.name
                )
            })
        })
    }

    /// The files read again whenever the kernel is timed: the module, then every fill file.
    pub fn input_files(&self) -> Vec<&Path> {
        let fills = self.args.iter().filter_map(|a| match a {
            Arg::Buffer {
                fill: Fill::File(path),
                ..
            } => Some(path.as_path()),
            _ => None,
        });
        std::iter::once(self.module.as_path())
            .chain(fills)
            .collect()
    }

    /// Blocks in the grid.
    pub fn blocks(&self) -> u32 {
        self.grid.iter().product()
    }

    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }

    /// The initial contents of every buffer argument, in order: deterministic, seeded from the
    /// kernel's name, so every run and every partition (and a CPU reference) sees the same data.
    pub fn host_buffers(&self) -> Result<Vec<Vec<u8>>, String> {
        use rand::{Rng, SeedableRng};
        let seed = crate::fnv::fnv1a(self.name.as_bytes());
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let mut out = Vec::new();
        for a in &self.args {
            let Arg::Buffer { bytes, fill } = a else {
                continue;
            };
            let n = *bytes as usize;
            let data = match fill {
                Fill::Zero => vec![0u8; n],
                Fill::RandomF32 => (0..n.div_ceil(4))
                    .flat_map(|_| rng.random::<f32>().to_le_bytes())
                    .take(n)
                    .collect(),
                Fill::RandomU32 => (0..n.div_ceil(4))
                    .flat_map(|_| rng.random::<u32>().to_le_bytes())
                    .take(n)
                    .collect(),
                Fill::File(path) => {
                    let mut data = read_fill(path, *bytes)?;
                    data.resize(n, 0);
                    data
                }
            };
            out.push(data);
        }
        Ok(out)
    }

    /// Bytes of all buffers.
    pub fn buffer_bytes(&self) -> u64 {
        self.args
            .iter()
            .map(|a| match a {
                Arg::Buffer { bytes, .. } => *bytes,
                _ => 0,
            })
            // Saturating: two buffers of 2^63 bytes wrapped to 0 and passed the memory check.
            .fold(0u64, u64::saturating_add)
    }
}

/// Names: `[A-Za-z0-9_.-]{1,64}`.
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.-".contains(&b))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    module: String,
    entry: String,
    #[serde(deserialize_with = "three")]
    grid: [u32; 3],
    #[serde(deserialize_with = "three")]
    block: [u32; 3],
    args: Vec<RawArg>,
    #[serde(default)]
    summary: Option<String>,
    #[serde(default)]
    shared_bytes: u32,
    #[serde(default)]
    blocks_per_sm: Option<u32>,
    #[serde(default)]
    check: Option<RawCheck>,
    #[serde(default)]
    sim: Option<toml::Table>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawArg {
    buffer: Option<u64>,
    fill: Option<String>,
    i32: Option<i32>,
    u32: Option<u32>,
    i64: Option<i64>,
    u64: Option<u64>,
    /// Read as f64, so that a value past f32's range is seen as given: read as an f32 it was
    /// infinity, and `f32 = 1e40` passed every check ([`finite_float`]).
    f32: Option<f64>,
    f64: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCheck {
    buffer: usize,
    sha256: Option<String>,
    reference: Option<String>,
    /// Read as f64, as [`RawArg::f32`] is.
    tolerance: Option<f64>,
}

/// The most threads a block may have on any CUDA device, and the largest grid dimension.
const MAX_THREADS: u32 = 1024;
const MAX_GRID: [u32; 3] = [u32::MAX >> 1, 65_535, 65_535];
/// CUDA's limit on each block dimension (x, y, z); the product is limited by [`MAX_THREADS`].
const MAX_BLOCK: [u32; 3] = [1024, 1024, 64];
/// Most bytes of buffers one manifest may ask for: far above any GPU's memory (the largest have
/// under 300 GB), so that a size no device can hold (a 16 EiB buffer was calibrated on the
/// simulator and served as a 222-day bound) is refused when the file is read; the device's own
/// free memory is checked when the kernel is prepared, on the GPU and the simulator alike.
pub const MAX_BUFFER_BYTES: u64 = 1 << 40;

const ACCEPTED_FILLS: &str = "zero, random-f32, random-u32, file:<path>";
const ACCEPTED_SCALARS: &str =
    "one of buffer (with a fill, zero when left out), i32, u32, i64, u64, f32, f64";

/// Read and check the manifest at `path`.
pub fn load(path: &Path) -> Result<Manifest, String> {
    // Read no further than the limit: a manifest is a few lines, and a huge file (a 20 MB
    // summary was accepted) would sit in memory and in every `ListKernels` answer.
    let bytes =
        read_regular(path, MAX_MANIFEST_BYTES + 1).map_err(|e| format!("cannot read it: {e}"))?;
    // The size first: the limit can cut a character in two.
    if bytes.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(format!(
            "it is larger than {MAX_MANIFEST_BYTES} bytes; accepted: a manifest of at most 64 KiB (the module and fill files are separate files)"
        ));
    }
    let text = String::from_utf8(bytes).map_err(|e| {
        format!("cannot read it: it is not UTF-8 text ({e}); accepted: a TOML file")
    })?;
    parse(path, &text)
}

/// Largest manifest file read.
const MAX_MANIFEST_BYTES: u64 = 64 * 1024;

/// Largest module read (PTX, cubin or fatbin): the largest fatbins of whole libraries are a few
/// hundred MiB.
const MAX_MODULE_BYTES: u64 = 1 << 30;

/// Read at most `limit` bytes of a regular file: a manifest, or a file it names. A FIFO named as
/// a fill file blocked the daemon in `open` (every bus call waited, and cancelling the job that
/// read it did nothing); a device (`/dev/zero`) reports no length to check and was read until
/// memory ran out. Refused unless it is a regular file before it is opened (opening a device can
/// act: `/dev/watchdog` arms a watchdog), then opened without blocking and checked again (it
/// may have been replaced in between).
pub(crate) fn read_regular(path: &Path, limit: u64) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let not_regular = || {
        std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            "it is not a regular file (a FIFO, a device or a directory); accepted: a regular file",
        )
    };
    let meta = std::fs::metadata(path).map_err(|e| dangling(path, e))?;
    if !meta.is_file() {
        return Err(not_regular());
    }
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(not_regular());
    }
    let mut bytes = Vec::new();
    file.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// A file that is not there but is listed (`ls` shows it) is a symbolic link to nothing: said so,
/// with its target, instead of a bare "No such file or directory".
fn dangling(path: &Path, e: std::io::Error) -> std::io::Error {
    if e.kind() != std::io::ErrorKind::NotFound {
        return e;
    }
    match std::fs::read_link(path) {
        Ok(target) => std::io::Error::new(
            e.kind(),
            format!(
                "it is a symbolic link to {}, which does not exist (relative targets are relative to the link's directory)",
                target.display()
            ),
        ),
        Err(_) => e,
    }
}

/// The text of a file named on a command line, read to at most `limit` bytes: a device or a
/// FIFO that never ends (`/dev/zero`) is refused at the limit, where it was read until memory
/// ran out. Any kind of file is read (a pipe from `<(zcat ...)` is a fine input).
pub fn read_text_limited(path: &Path, limit: u64) -> std::io::Result<String> {
    use std::io::Read;
    let mut bytes = Vec::new();
    std::fs::File::open(path)?
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    if bytes.len() as u64 > limit {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("longer than {limit} bytes (a device or an endless stream?); accepted: a file of at most {limit} bytes"),
        ));
    }
    String::from_utf8(bytes).map_err(|e| {
        std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!(
                "not UTF-8 text (byte {} is not); accepted: UTF-8 text",
                e.utf8_error().valid_up_to()
            ),
        )
    })
}

/// A module's bytes, refused above [`MAX_MODULE_BYTES`].
pub(crate) fn read_module(path: &Path) -> Result<Vec<u8>, String> {
    let bytes = read_regular(path, MAX_MODULE_BYTES + 1)
        .map_err(|e| format!("module {} cannot be read: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_MODULE_BYTES {
        return Err(format!(
            "module {} is larger than {MAX_MODULE_BYTES} bytes; accepted: a module of at most 1 GiB",
            path.display()
        ));
    }
    Ok(bytes)
}

/// A fill file's bytes, refused when longer than its buffer (it may have grown since loading).
fn read_fill(path: &Path, buffer: u64) -> Result<Vec<u8>, String> {
    let bytes = read_regular(path, buffer.saturating_add(1))
        .map_err(|e| format!("fill file {} cannot be read: {e}", path.display()))?;
    if bytes.len() as u64 > buffer {
        return Err(format!(
            "fill file {} has more bytes than its buffer's {buffer}",
            path.display()
        ));
    }
    Ok(bytes)
}

/// Check a manifest's text; `path` locates the module and fill files.
pub fn parse(path: &Path, text: &str) -> Result<Manifest, String> {
    let raw: Raw = toml::from_str(text).map_err(|e| describe_toml(&e, text))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    if !valid_name(&raw.name) {
        return Err(format!(
            "name `{}` is not accepted; accepted: 1 to 64 of A-Z a-z 0-9 _ . -",
            raw.name
        ));
    }
    check_geometry(&raw)?;
    let args = raw
        .args
        .iter()
        .enumerate()
        .map(|(i, a)| arg(i, a, dir))
        .collect::<Result<Vec<_>, _>>()?;
    check_buffers_total(&args)?;
    let module = dir.join(&raw.module);
    let (module_kind, bytes) = checked_module(&module, &raw.entry, &args)?;
    let check = raw
        .check
        .as_ref()
        .map(|c| output_check(c, &args, dir))
        .transpose()?;
    let (code_sha256, inputs_sha256) = code_digests(text, &bytes, &args)?;
    Ok(Manifest {
        path: path.to_path_buf(),
        summary: raw
            .summary
            .clone()
            .unwrap_or_else(|| format!("{} from {}", raw.entry, raw.module)),
        name: raw.name,
        module,
        module_kind,
        module_sha256: hex(&Sha256::digest(&bytes)),
        code_sha256,
        inputs_sha256,
        entry: raw.entry,
        grid: raw.grid,
        block: raw.block,
        shared_bytes: raw.shared_bytes,
        blocks_per_sm: raw.blocks_per_sm,
        args,
        check,
        sim: raw.sim,
    })
}

/// Refuses buffers that take more than [`MAX_BUFFER_BYTES`] in all.
fn check_buffers_total(args: &[Arg]) -> Result<(), String> {
    let buffers = args
        .iter()
        .map(|a| match a {
            Arg::Buffer { bytes, .. } => *bytes,
            _ => 0,
        })
        .fold(0u64, u64::saturating_add);
    if buffers > MAX_BUFFER_BYTES {
        return Err(format!(
            "the buffers take {buffers} bytes in all; accepted: 1 byte to {MAX_BUFFER_BYTES} (1 TiB) in all, and the device's free memory is checked when the kernel is prepared"
        ));
    }
    Ok(())
}

/// The module's kind and bytes, once it is found to define `entry` (with parameters that
/// match `args`, where it is PTX).
fn checked_module(
    module: &Path,
    entry: &str,
    args: &[Arg],
) -> Result<(ModuleKind, Vec<u8>), String> {
    let module_kind = module_kind(module)?;
    let bytes = read_module(module)?;
    check_entry(module_kind, &bytes, entry, module)?;
    if module_kind == ModuleKind::Ptx {
        check_ptx_params(&String::from_utf8_lossy(&bytes), entry, args)?;
    }
    Ok((module_kind, bytes))
}

/// [`Manifest::code_sha256`] (the manifest's text, then the inputs) and
/// [`Manifest::inputs_sha256`] (the module's and fill files' bytes alone), from one read of each
/// fill file: each part length-prefixed, so that no two different sets of parts hash the same
/// bytes.
fn code_digests(text: &str, module: &[u8], args: &[Arg]) -> Result<(String, String), String> {
    let mut code = Sha256::new();
    let mut inputs = Sha256::new();
    let mut part = |bytes: &[u8], with_inputs: bool| {
        let len = (bytes.len() as u64).to_le_bytes();
        code.update(len);
        code.update(bytes);
        if with_inputs {
            inputs.update(len);
            inputs.update(bytes);
        }
    };
    part(text.as_bytes(), false);
    part(module, true);
    for a in args {
        if let Arg::Buffer {
            fill: Fill::File(path),
            bytes,
        } = a
        {
            part(&read_fill(path, *bytes)?, true);
        }
    }
    Ok((hex(&code.finalize()), hex(&inputs.finalize())))
}

/// A TOML error of `text` as the user can find it: `line N: ` before toml's message, where
/// toml gives a span. Shared with the other TOML files read (device descriptions), so every
/// one names its lines alike.
pub(crate) fn describe_toml(e: &toml::de::Error, text: &str) -> String {
    // A missing key is reported with a span over the whole table (from offset 0 at the top
    // level), which names a line that has nothing to do with it: no line then.
    let whole_table = e.message().starts_with("missing field");
    let at = e.span().filter(|_| !whole_table).map(|span| {
        // Newlines before the error, plus one: `lines()` dropped the line of a key that starts
        // one (the prefix then ends in a newline), naming the line before it.
        let line = text[..span.start.min(text.len())].matches('\n').count() + 1;
        format!("line {line}: ")
    });
    format!("{}{}", at.unwrap_or_default(), e.message())
}

fn check_geometry(raw: &Raw) -> Result<(), String> {
    for (i, (&g, &max)) in raw.grid.iter().zip(&MAX_GRID).enumerate() {
        if g == 0 || g > max {
            return Err(format!(
                "grid[{i}] is {g}; accepted: 1 to {max} blocks in that dimension"
            ));
        }
    }
    // CUDA allows more, but the model counts a launch's blocks (its waves) in 32 bits: refused
    // here rather than counted wrong.
    let blocks: u64 = raw.grid.iter().map(|&g| u64::from(g)).product();
    if blocks > u64::from(u32::MAX) {
        return Err(format!(
            "grid {:?} has {blocks} blocks; accepted: at most {} in all",
            raw.grid,
            u32::MAX
        ));
    }
    if raw.block.contains(&0) {
        return Err(format!(
            "block is {:?}; accepted: every dimension at least 1",
            raw.block
        ));
    }
    for (i, (&b, &max)) in raw.block.iter().zip(&MAX_BLOCK).enumerate() {
        if b > max {
            return Err(format!(
                "block[{i}] is {b}; accepted: 1 to {max} threads in that dimension (CUDA's limits: 1024, 1024, 64), at most {MAX_THREADS} in all"
            ));
        }
    }
    let threads: u64 = raw.block.iter().map(|&b| u64::from(b)).product();
    if threads > u64::from(MAX_THREADS) {
        return Err(format!(
            "block {:?} has {threads} threads; accepted: at most {MAX_THREADS}",
            raw.block
        ));
    }
    if raw.blocks_per_sm == Some(0) {
        return Err(
            "blocks_per_sm is 0; accepted: at least 1, or leave it out to measure it".into(),
        );
    }
    // No GPU gives a block this much (Hopper and Blackwell: 227 KiB); the simulator would time
    // a kernel that can never launch.
    if raw.shared_bytes > MAX_SHARED_BYTES {
        return Err(format!(
            "shared_bytes is {}; accepted: at most {MAX_SHARED_BYTES} bytes (1 MiB) of dynamic shared memory per block",
            raw.shared_bytes
        ));
    }
    Ok(())
}

/// Most dynamic shared memory per block a manifest may ask for: above every GPU's limit, which
/// the device checks at launch.
const MAX_SHARED_BYTES: u32 = 1 << 20;

/// `given`, named `what`, if it is a finite value of its type (`as_f32`: f32, else f64): TOML
/// writes `nan` and `inf`, and a value past f32's range becomes infinity as an f32 (`f32 = 1e40`
/// passed `wcetctl kernels check`, and the kernel would have been timed with an infinite
/// argument no one wrote).
/// A `grid` or `block` of exactly three numbers: read as `[u32; 3]`, a fourth was dropped
/// without a word (a black-box hunt found it), while two were refused.
fn three<'de, D: serde::Deserializer<'de>>(d: D) -> Result<[u32; 3], D::Error> {
    let given = Vec::<u32>::deserialize(d)?;
    <[u32; 3]>::try_from(given.as_slice()).map_err(|_| {
        serde::de::Error::invalid_length(given.len(), &"an array of length 3 ([x, y, z])")
    })
}

fn finite_float(what: &str, given: f64, as_f32: bool) -> Result<f64, String> {
    let (ty, finite, max) = if as_f32 {
        ("f32", (given as f32).is_finite(), format!("{:e}", f32::MAX))
    } else {
        ("f64", given.is_finite(), format!("{:e}", f64::MAX))
    };
    if finite {
        return Ok(given);
    }
    Err(format!(
        "{what}: {given:e} is not a finite {ty}; accepted: a number from -{max} to {max}"
    ))
}

fn arg(i: usize, a: &RawArg, dir: &Path) -> Result<Arg, String> {
    let float = |given: Option<f64>, as_f32| {
        given
            .map(|g| finite_float(&format!("args[{i}]"), g, as_f32))
            .transpose()
    };
    let scalars = [
        a.i32.map(Arg::I32),
        a.u32.map(Arg::U32),
        a.i64.map(Arg::I64),
        a.u64.map(Arg::U64),
        float(a.f32, true)?.map(|v| Arg::F32(v as f32)),
        float(a.f64, false)?.map(Arg::F64),
    ];
    let mut given: Vec<Arg> = scalars.into_iter().flatten().collect();
    if let Some(bytes) = a.buffer {
        if bytes == 0 {
            return Err(format!(
                "args[{i}]: buffer of 0 bytes; accepted: at least 1 byte"
            ));
        }
        let fill = match a.fill.as_deref() {
            None | Some("zero") => Fill::Zero,
            Some("random-f32") => Fill::RandomF32,
            Some("random-u32") => Fill::RandomU32,
            Some(f) if f.starts_with("file:") => {
                let file = dir.join(&f["file:".len()..]);
                let len = std::fs::metadata(&file)
                    .map_err(|e| format!("args[{i}]: fill file {} ({e})", file.display()))?
                    .len();
                if len > bytes {
                    return Err(format!(
                        "args[{i}]: fill file {} has {len} bytes, more than the buffer's {bytes}",
                        file.display()
                    ));
                }
                Fill::File(file)
            }
            Some(other) => {
                return Err(format!(
                    "args[{i}]: unknown fill `{other}`; accepted: {ACCEPTED_FILLS}"
                ))
            }
        };
        given.push(Arg::Buffer { bytes, fill });
    } else if a.fill.is_some() {
        return Err(format!(
            "args[{i}]: fill without buffer; a fill needs `buffer = <bytes>`"
        ));
    }
    match given.len() {
        1 => Ok(given.remove(0)),
        0 => Err(format!("args[{i}]: empty; accepted: {ACCEPTED_SCALARS}")),
        _ => Err(format!(
            "args[{i}]: more than one kind given; accepted: exactly {ACCEPTED_SCALARS}"
        )),
    }
}

fn module_kind(module: &Path) -> Result<ModuleKind, String> {
    match module.extension().and_then(|e| e.to_str()) {
        Some("ptx") => Ok(ModuleKind::Ptx),
        Some("cubin") => Ok(ModuleKind::Cubin),
        Some("fatbin") => Ok(ModuleKind::Fatbin),
        Some("cu") => Ok(ModuleKind::Cu),
        _ => Err(format!(
            "module {} has an unknown kind; accepted: .ptx, .cubin, .fatbin or .cu",
            module.display()
        )),
    }
}

/// The entry point must be defined in the module: `.entry NAME(` in PTX, an `extern "C"`
/// `__global__` function in CUDA C as far as text can tell ([`cu_defines_kernel`]), the symbol's name in a CUBIN (a CUDA ELF
/// object) or an uncompressed fatbin (a fatbin header). Unchecked, an entry in a comment of a
/// `.cu`, and 13 bytes of `\x7fELF` and the name as a `.cubin`, were calibrated on the simulator
/// and served (a black-box hunt found both).
fn check_entry(kind: ModuleKind, bytes: &[u8], entry: &str, module: &Path) -> Result<(), String> {
    check_binary_header(kind, bytes, module)?;
    let text = String::from_utf8_lossy(bytes);
    let found = match kind {
        ModuleKind::Ptx => ptx_entry(&text, entry).is_some(),
        ModuleKind::Cu => cu_defines_kernel(&crate::ptx_text::without_comments(&text), entry),
        ModuleKind::Cubin | ModuleKind::Fatbin => {
            let mut needle = entry.as_bytes().to_vec();
            needle.push(0);
            bytes.windows(needle.len()).any(|w| w == needle.as_slice())
        }
    };
    if found {
        Ok(())
    } else {
        let looked_for = match kind {
            ModuleKind::Ptx => format!("`.entry {entry}(` in the PTX"),
            ModuleKind::Cu | ModuleKind::Cubin | ModuleKind::Fatbin => {
                format!("`{entry}` as an extern \"C\" __global__ function")
            }
        };
        Err(format!(
            "module {} does not define the entry point `{entry}`: looked for {looked_for}{}",
            module.display(),
            found_entries(kind, bytes)
        ))
    }
}

/// Whether CUDA C `code` (comments removed) can define `entry` as an `extern "C"` kernel: it says
/// `extern "C"` and `__global__`, and names `entry`, whole, before a `(`. Not a parser: which
/// declaration a macro makes `__global__` is the compiler's to know, and asking more refused
/// real kernels (`#define KERNEL \` continued, macros of macros; a review found them); NVRTC
/// refuses a module without the entry when the kernel is first timed on a GPU. Comments no
/// longer count, nor a name inside another (`kp` in `kpx(`): an entry only in a comment was
/// calibrated and served on the simulator (a black-box hunt found it).
fn cu_defines_kernel(code: &str, entry: &str) -> bool {
    let ident = |c: char| c.is_ascii_alphanumeric() || c == '_';
    code.contains("extern \"C\"")
        && code.contains("__global__")
        && code.match_indices(entry).any(|(at, _)| {
            !code[..at].ends_with(ident) && code[at + entry.len()..].trim_start().starts_with('(')
        })
}

/// A `.cubin` is an ELF object for the CUDA machine (`EM_CUDA`, 190) and a `.fatbin` starts with
/// the fatbin header's magic (`0xBA55ED50`): a file that is neither cannot be loaded by the
/// driver, whatever names it holds.
fn check_binary_header(kind: ModuleKind, bytes: &[u8], module: &Path) -> Result<(), String> {
    const EM_CUDA: u16 = 190;
    const FATBIN_MAGIC: u32 = 0xBA55_ED50;
    let le16 = |at: usize| {
        bytes
            .get(at..at + 2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    let le32 = |at: usize| {
        bytes
            .get(at..at + 4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    };
    let (ok, accepted) = match kind {
        ModuleKind::Cubin => (
            bytes.starts_with(b"\x7fELF") && bytes.len() >= 64 && le16(18) == Some(EM_CUDA),
            "a CUBIN: an ELF object for the CUDA machine (e_machine 190), as `nvcc -cubin` writes",
        ),
        ModuleKind::Fatbin => (
            le32(0) == Some(FATBIN_MAGIC),
            "a fatbin starting with its header's magic 0xBA55ED50, as `nvcc -fatbin` writes",
        ),
        ModuleKind::Ptx | ModuleKind::Cu => return Ok(()),
    };
    if ok {
        Ok(())
    } else {
        Err(format!(
            "module {} is not a loadable module of its kind; accepted: {accepted}",
            module.display()
        ))
    }
}

/// For an error: the entries a PTX module does define (at most ten), or nothing for the others.
fn found_entries(kind: ModuleKind, bytes: &[u8]) -> String {
    if kind != ModuleKind::Ptx {
        return String::new();
    }
    let text = crate::ptx_text::without_comments(&String::from_utf8_lossy(bytes));
    let names: Vec<String> = crate::ptx_text::entries(&text)
        .into_iter()
        .filter(|e| e.body.is_some())
        .map(|e| format!("`{}`", e.name))
        .take(10)
        .collect();
    if names.is_empty() {
        "; it defines no entry".into()
    } else {
        format!("; it defines {}", names.join(", "))
    }
}

/// The parameter list of `.entry NAME` in PTX (comments removed), when the entry is there.
fn ptx_entry(ptx: &str, entry: &str) -> Option<String> {
    let text = crate::ptx_text::without_comments(ptx);
    crate::ptx_text::entries(&text)
        .into_iter()
        .find(|e| e.name == entry && e.body.is_some())
        .map(|e| e.params.to_string())
}

/// A PTX entry's parameters against `args`: the same count, pointers as 64-bit, scalars of the
/// declared width and kind.
fn check_ptx_params(ptx: &str, entry: &str, args: &[Arg]) -> Result<(), String> {
    let Some(list) = ptx_entry(ptx, entry) else {
        return Ok(());
    };
    let list = list.as_str();
    let params: Vec<&str> = list
        .split(',')
        .map(str::trim)
        .filter(|p| p.starts_with(".param"))
        .collect();
    if params.len() != args.len() {
        return Err(format!(
            "`{entry}` takes {} parameters in the PTX, the manifest gives {} args",
            params.len(),
            args.len()
        ));
    }
    for (i, (p, a)) in params.iter().zip(args).enumerate() {
        let ty = p.split_whitespace().nth(1).unwrap_or("");
        let fits = match a {
            Arg::Buffer { .. } | Arg::I64(_) | Arg::U64(_) => {
                matches!(ty, ".u64" | ".s64" | ".b64")
            }
            Arg::I32(_) | Arg::U32(_) => matches!(ty, ".u32" | ".s32" | ".b32"),
            Arg::F32(_) => matches!(ty, ".f32" | ".b32"),
            Arg::F64(_) => matches!(ty, ".f64" | ".b64"),
        };
        if !fits {
            return Err(format!(
                "args[{i}] is {} but `{entry}`'s parameter {i} is `{p}` in the PTX",
                describe_arg(a)
            ));
        }
    }
    Ok(())
}

fn describe_arg(a: &Arg) -> &'static str {
    match a {
        Arg::Buffer { .. } => "a buffer (a 64-bit pointer)",
        Arg::I32(_) => "an i32",
        Arg::U32(_) => "a u32",
        Arg::I64(_) => "an i64",
        Arg::U64(_) => "a u64",
        Arg::F32(_) => "an f32",
        Arg::F64(_) => "an f64",
    }
}

fn output_check(c: &RawCheck, args: &[Arg], dir: &Path) -> Result<OutputCheck, String> {
    let bytes = match args.get(c.buffer) {
        Some(Arg::Buffer { bytes, .. }) => *bytes,
        _ => {
            return Err(format!(
                "check.buffer = {} is not a buffer argument; accepted: the index of one of args",
                c.buffer
            ))
        }
    };
    match (&c.sha256, &c.reference) {
        (Some(_), None) if c.tolerance.is_some() => Err(
            "check.tolerance goes with check.reference, not check.sha256 (a checksum is exact); accepted: sha256 alone, or reference with an optional tolerance".into(),
        ),
        (Some(sha), None) => {
            let sha = sha.to_ascii_lowercase();
            if sha.len() != 64 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!(
                    "check.sha256 `{sha}` is not accepted; accepted: 64 hexadecimal digits"
                ));
            }
            Ok(OutputCheck::Sha256 {
                buffer: c.buffer,
                sha256: sha,
            })
        }
        (None, Some(reference)) => {
            let file = dir.join(reference);
            let len = std::fs::metadata(&file)
                .map_err(|e| format!("check.reference {} ({e})", file.display()))?
                .len();
            if len > bytes || len % 4 != 0 {
                return Err(format!(
                    "check.reference {} has {len} bytes; accepted: whole f32 values, at most the buffer's {bytes} bytes",
                    file.display()
                ));
            }
            Ok(OutputCheck::Reference {
                buffer: c.buffer,
                file,
                tolerance: tolerance(c.tolerance)?,
            })
        }
        _ => Err("check needs exactly one of sha256 = \"<hex>\" or reference = \"<file>\" (with an optional tolerance)".into()),
    }
}

/// `check.tolerance`, 1e-5 when not given: a NaN or negative one fails every output, and an
/// infinite one (`1e40` read as an f32) lets any finite output pass.
fn tolerance(given: Option<f64>) -> Result<f32, String> {
    let Some(given) = given else { return Ok(1e-5) };
    // Told first what is accepted of a tolerance, not of any f32 (a NaN was told negatives were).
    let accepted = format!("accepted: a number from 0 to {:e}", f32::MAX);
    if given.is_nan() || (given as f32).is_infinite() {
        return Err(format!(
            "check.tolerance: {given:e} is not a finite f32; {accepted}"
        ));
    }
    let t = given;
    if t < 0.0 {
        return Err(format!("check.tolerance: {t:e} is negative; {accepted}"));
    }
    Ok(t as f32)
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A loaded manifest's module and fill files as they are on disk now.
#[derive(Debug, Clone, PartialEq)]
pub enum OnDisk {
    /// Read, and the bytes loaded.
    Same,
    /// Read, and other bytes: other code than was loaded, and why.
    Changed(String),
    /// Not readable now, and why: whether they changed is not known.
    Unreadable(String),
}

/// SHA-256 of `bytes`, lower-case hex.
pub fn sha256(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Every `*.toml` in `dirs`, each loaded or rejected with (file, reason), in name order. A
/// directory that cannot be read is one rejection. A file reached twice (a directory given
/// twice, as `D` and `D/`, or through a link) is read once, as `kernels check` reads it: read
/// twice, each copy took the other's name, so every reload rejected it and `Health` stayed
/// degraded while it was served (a black-box hunt found it).
pub fn load_dirs(dirs: &[PathBuf]) -> (Vec<Manifest>, Vec<(String, String)>) {
    let (mut loaded, mut rejected) = (Vec::new(), Vec::new());
    let mut seen = std::collections::HashSet::new();
    for dir in dirs {
        let entries = match std::fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) => {
                rejected.push((
                    dir.display().to_string(),
                    format!("cannot read the directory: {e}"),
                ));
                continue;
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "toml"))
            .collect();
        files.sort();
        files.retain(|f| seen.insert(std::fs::canonicalize(f).unwrap_or_else(|_| f.clone())));
        for file in files {
            match load(&file) {
                Ok(m) => loaded.push(m),
                Err(why) => rejected.push((file.display().to_string(), why)),
            }
        }
    }
    (loaded, rejected)
}

#[cfg(test)]
mod tests {
    use super::*;

    const PTX: &str = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry saxpy(\n\t.param .u64 saxpy_param_0,\n\t.param .u64 saxpy_param_1,\n\t.param .f32 saxpy_param_2,\n\t.param .u32 saxpy_param_3\n)\n{\n\tret;\n}\n";

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    fn manifest(extra: &str) -> String {
        format!(
            "name = \"app.saxpy\"\nmodule = \"saxpy.ptx\"\nentry = \"saxpy\"\ngrid = [64, 1, 1]\nblock = [256, 1, 1]\nargs = [\n  {{ buffer = 65536, fill = \"random-f32\" }},\n  {{ buffer = 65536, fill = \"zero\" }},\n  {{ f32 = 2.0 }},\n  {{ u32 = 16384 }},\n]\n{extra}"
        )
    }

    /// A `.cu` defines its entry only outside comments, as a whole name before a `(`, with its
    /// qualifiers written out or from macros; a `.cubin` is a CUDA ELF object and a `.fatbin`
    /// starts with its magic, whatever names they hold (a comment and 13 bytes of `\x7fELF` and
    /// a name were served).
    #[test]
    fn a_module_defines_its_entry_only_as_code_of_its_kind() {
        let cu = |code: &str| check_entry(ModuleKind::Cu, code.as_bytes(), "kp", Path::new("k.cu"));
        cu("extern \"C\" __global__ void kp(float* x) {}").unwrap();
        cu("extern \"C\" {\n__global__ void __launch_bounds__(256) kp (float* x) {}\n}").unwrap();
        // Qualifiers from a macro, after other code, continued, or of another macro.
        cu("#define KERNEL extern \"C\" __global__\n__device__ float twice(float v) { return 2.0f * v; }\nKERNEL void kp(float* x) {}").unwrap();
        cu("#define GLOBAL __global__\n__device__ int k0;\nextern \"C\" GLOBAL void kp(float* x) {}").unwrap();
        cu("#define KERNEL \\\n  extern \"C\" __global__\n__device__ int k0;\nKERNEL void kp(float* x) {}").unwrap();
        cu("#define GLOBAL __global__\n#define KERNEL extern \"C\" GLOBAL\n__device__ int k0;\nKERNEL void kp(float* x) {}").unwrap();
        for decoy in [
            "// extern \"C\" __global__ void kp(float* x) {}\n__global__ void other() {}",
            "/* extern \"C\" __global__ void kp(float* x) {} */",
            "extern \"C\" __global__ void kpx(float* x) {}",
        ] {
            assert!(cu(decoy).is_err(), "{decoy}");
        }
        let mut elf = vec![0u8; 64];
        elf[..4].copy_from_slice(b"\x7fELF");
        elf[18..20].copy_from_slice(&190u16.to_le_bytes());
        elf.extend_from_slice(b"kp\0");
        let cubin = |b: &[u8]| check_entry(ModuleKind::Cubin, b, "kp", Path::new("k.cubin"));
        cubin(&elf).unwrap();
        let why = cubin(b"\x7fELFjunk kp\0").unwrap_err();
        assert!(why.contains("accepted: a CUBIN: an ELF object"), "{why}");
        let mut x86 = elf.clone();
        x86[18..20].copy_from_slice(&62u16.to_le_bytes());
        assert!(cubin(&x86).is_err());
        let fatbin = |b: &[u8]| check_entry(ModuleKind::Fatbin, b, "kp", Path::new("k.fatbin"));
        let mut fat = 0xBA55_ED50u32.to_le_bytes().to_vec();
        fat.extend_from_slice(b"\x01\x00\x10\x00kp\0");
        fatbin(&fat).unwrap();
        assert!(fatbin(&elf).is_err());
    }

    /// A directory given twice, or through a link, is read once: each file is one manifest.
    #[test]
    fn a_directory_given_twice_is_read_once() {
        let dir = tempfile::tempdir().unwrap();
        let kd = dir.path().join("kd");
        std::fs::create_dir(&kd).unwrap();
        write(&kd, "saxpy.ptx", PTX);
        write(&kd, "saxpy.toml", &manifest(""));
        std::os::unix::fs::symlink(&kd, dir.path().join("link")).unwrap();
        let dirs = [kd.clone(), dir.path().join("kd/"), dir.path().join("link")];
        let (loaded, rejected) = load_dirs(&dirs);
        assert_eq!((loaded.len(), rejected), (1, Vec::new()));
        assert_eq!(loaded[0].path, kd.join("saxpy.toml"));
    }

    /// The entry and its parameters are read as the predictor reads them: a space before the
    /// parameter list is PTX too, and a commented-out entry is not one.
    #[test]
    fn ptx_entries_are_read_whatever_the_layout() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.toml");
        let spaced = PTX.replace(".entry saxpy(", ".entry saxpy (");
        write(dir.path(), "saxpy.ptx", &spaced);
        parse(&path, &manifest("")).unwrap();
        // `__launch_bounds__` puts directives between the parameters and the body.
        let bounded = PTX.replace(")\n{", ")\n.maxntid 256, 1, 1\n.minnctapersm 2\n{");
        assert_ne!(bounded, PTX);
        write(dir.path(), "saxpy.ptx", &bounded);
        parse(&path, &manifest("")).unwrap();
        // A decoy in a comment with the right parameters, the real one with three.
        let decoy = format!(
            "// .visible .entry saxpy(.param .u64 a, .param .u64 b, .param .f32 c, .param .u32 n)\n{}",
            PTX.replace("\t.param .u32 saxpy_param_3\n", "")
                .replace("saxpy_param_2,", "saxpy_param_2")
        );
        write(dir.path(), "saxpy.ptx", &decoy);
        let e = parse(&path, &manifest("")).unwrap_err();
        assert!(e.contains("takes 3 parameters"), "{e}");
        // Declared but never defined.
        write(
            dir.path(),
            "saxpy.ptx",
            ".visible .entry saxpy(.param .u64 a);\n",
        );
        let e = parse(&path, &manifest("")).unwrap_err();
        assert!(e.contains("does not define the entry point"), "{e}");
    }

    /// A black-box run loaded a manifest with a 20 MB summary.
    #[test]
    fn a_manifest_larger_than_64_kib_is_refused_before_it_is_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let ok = write(dir.path(), "ok.toml", &manifest(""));
        load(&ok).unwrap();
        // Multi-byte characters across the limit: still the size that is refused.
        // (the 65,537th byte is the first of an é).
        let long = format!("summary = \"x{}\"\n", "é".repeat(35_000));
        let big = write(dir.path(), "big.toml", &(long + &manifest("")));
        let e = load(&big).unwrap_err();
        assert!(e.contains("at most 64 KiB"), "{e}");
    }

    /// An unknown key at the start of line 6 is named on line 6 (it was named on line 5).
    #[test]
    fn toml_errors_name_the_line_they_are_on() {
        let text = "name = \"x\"\n\n\n\n\nzzz = 1\n";
        let e = toml::from_str::<toml::Value>("a = \n").unwrap_err();
        assert!(describe_toml(&e, "a = \n").starts_with("line 1: "));
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct OnlyName {
            name: String,
        }
        let e = toml::from_str::<OnlyName>(text).unwrap_err();
        let said = describe_toml(&e, text);
        assert!(said.starts_with("line 6: "), "{said}");
        // A key that is missing is on no line: "line 1" sent readers to the wrong place.
        let e = toml::from_str::<OnlyName>("\n\n").unwrap_err();
        let said = describe_toml(&e, "\n\n");
        assert_eq!(said, "missing field `name`", "{said}");
    }

    /// A fill file, a module or a manifest that is a FIFO or a device is refused at once: a FIFO
    /// blocked the daemon in `open`, and `/dev/zero` was read until memory ran out. A FIFO put in
    /// place of a fill file after loading is refused too, not waited on.
    #[test]
    fn files_that_are_not_regular_are_refused_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let fifo = dir.path().join("fifo.bin");
        let made = std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap();
        assert!(made.success());
        for fill in ["file:fifo.bin", "file:/dev/zero"] {
            let text = manifest("").replace("fill = \"random-f32\"", &format!("fill = \"{fill}\""));
            let e = load(&write(dir.path(), "saxpy.toml", &text)).unwrap_err();
            assert!(
                e.contains("not a regular file") && e.contains("accepted"),
                "{e}"
            );
        }
        let e = load(&fifo).unwrap_err();
        assert!(e.contains("not a regular file"), "{e}");
        let fill = write(dir.path(), "x.bin", "0123");
        let text = manifest("").replace("fill = \"random-f32\"", "fill = \"file:x.bin\"");
        let m = load(&write(dir.path(), "saxpy.toml", &text)).unwrap();
        std::fs::remove_file(&fill).unwrap();
        std::fs::rename(&fifo, &fill).unwrap();
        let why = m.changed_on_disk().unwrap();
        assert!(why.contains("not a regular file"), "{why}");
        assert!(m.host_buffers().unwrap_err().contains("not a regular file"));
    }

    /// Fields no launch can have are refused, saying what is accepted: a tolerance on an exact
    /// checksum (silently ignored before), more shared memory than any GPU gives a block.
    #[test]
    fn a_check_or_shared_memory_no_launch_can_have_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let sha = "0".repeat(64);
        for (extra, why) in [
            (
                format!("check = {{ buffer = 1, sha256 = \"{sha}\", tolerance = 1e-5 }}\n"),
                "check.tolerance goes with check.reference",
            ),
            (
                "shared_bytes = 99999999\n".to_string(),
                "shared_bytes is 99999999",
            ),
        ] {
            let text = manifest("").replacen("args = [", &format!("{extra}args = ["), 1);
            let e = load(&write(dir.path(), "saxpy.toml", &text)).unwrap_err();
            assert!(e.contains(why) && e.contains("accepted"), "{e}");
        }
    }

    /// A file changed on disk since loading is named: the module, or the fill file.
    #[test]
    fn changed_on_disk_names_the_file_that_changed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let fill = write(dir.path(), "x.bin", "0123");
        let text = manifest("").replace("fill = \"random-f32\"", "fill = \"file:x.bin\"");
        let m = load(&write(dir.path(), "saxpy.toml", &text)).unwrap();
        assert_eq!(m.changed_on_disk(), None);
        std::fs::write(&fill, "4567").unwrap();
        let why = m.changed_on_disk().unwrap();
        assert!(
            why.starts_with(&format!(
                "the fill file {} of `app.saxpy` changed",
                fill.display()
            )),
            "{why}"
        );
        std::fs::write(&fill, "0123").unwrap();
        assert_eq!(m.changed_on_disk(), None);
        // Grown past its buffer: changed, not a file that cannot be read (which keeps the
        // previous version at a reload).
        std::fs::write(&fill, vec![b'0'; 1 << 20]).unwrap();
        assert!(
            matches!(m.on_disk(), OnDisk::Changed(why) if why.contains("more than its buffer's")),
            "{:?}",
            m.on_disk()
        );
        std::fs::write(&fill, "0123").unwrap();
        write(dir.path(), "saxpy.ptx", &format!("{PTX}// edited\n"));
        let why = m.changed_on_disk().unwrap();
        assert!(
            why.starts_with("the module ") && why.contains("saxpy.ptx of `app.saxpy` changed"),
            "{why}"
        );
    }

    #[test]
    fn a_good_manifest_loads_with_its_module_hashed() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let path = write(dir.path(), "saxpy.toml", &manifest("check = { buffer = 1, sha256 = \"00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\" }\n"));
        let m = load(&path).unwrap();
        assert_eq!(m.name, "app.saxpy");
        assert_eq!(m.blocks(), 64);
        assert_eq!(m.args.len(), 4);
        assert_eq!(m.module_sha256, sha256(PTX.as_bytes()));
        assert!(matches!(
            m.check,
            Some(OutputCheck::Sha256 { buffer: 1, .. })
        ));
        assert_eq!(m.buffer_bytes(), 131_072);
    }

    /// A float that is not a finite value of its type is refused, named with the value and what
    /// is accepted: `f32 = 1e40` passed `wcetctl kernels check` as infinity.
    #[test]
    fn a_float_that_is_not_finite_in_its_type_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let path = dir.path().join("m.toml");
        let f32_range = "accepted: a number from -3.4028235e38 to 3.4028235e38";
        let f64_range = "accepted: a number from -1.7976931348623157e308 to 1.7976931348623157e308";
        let with = |arg: &str| manifest("").replace("{ f32 = 2.0 }", arg);
        for (ty, value, shown) in [
            ("f32", "1e40", "1e40"),
            ("f32", "-1e39", "-1e39"),
            ("f32", "inf", "inf"),
            ("f32", "nan", "NaN"),
            ("f64", "-inf", "-inf"),
            ("f64", "nan", "NaN"),
        ] {
            let text = with(&format!("{{ {ty} = {value} }}"));
            let range = if ty == "f32" { f32_range } else { f64_range };
            let said = format!("args[2]: {shown} is not a finite {ty}; {range}");
            let e = parse(&path, &text).unwrap_err();
            assert!(e.contains(&said), "{text}: `{e}` lacks `{said}`");
        }
        // The largest f32 is one.
        let m = parse(&path, &with("{ f32 = 3.4028235e38 }")).unwrap();
        assert_eq!(m.args[2], Arg::F32(f32::MAX));
        // A tolerance compares outputs: infinite, NaN or negative, it passes or fails them all.
        write(dir.path(), "expected.bin", "");
        let check = |t: &str| {
            let text = manifest(&format!(
                "check = {{ buffer = 1, reference = \"expected.bin\", tolerance = {t} }}\n"
            ));
            parse(&path, &text)
        };
        check("1e-3").unwrap();
        let tolerances = "accepted: a number from 0 to 3.4028235e38";
        for (t, said) in [
            (
                "1e40",
                format!("check.tolerance: 1e40 is not a finite f32; {tolerances}"),
            ),
            (
                "nan",
                format!("check.tolerance: NaN is not a finite f32; {tolerances}"),
            ),
            (
                "-1e-5",
                "check.tolerance: -1e-5 is negative; accepted: a number from 0 to 3.4028235e38"
                    .to_string(),
            ),
        ] {
            let e = check(t).unwrap_err();
            assert!(e.contains(&said), "{t}: `{e}` lacks `{said}`");
        }
    }

    #[test]
    fn bad_manifests_are_rejected_with_what_is_accepted() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        let cases: Vec<(String, &str)> = vec![
            (
                manifest("").replace("entry = \"saxpy\"\n", ""),
                "missing field `entry`",
            ),
            (
                manifest("").replace("grid = [64, 1, 1]", "grid = [0, 1, 1]"),
                "grid[0] is 0",
            ),
            (
                manifest("").replace("grid = [64, 1, 1]", "grid = [2147483647, 65535, 1]"),
                "has 140735340806145 blocks; accepted: at most 4294967295 in all",
            ),
            (
                manifest("").replace("grid = [64, 1, 1]", "grid = \"big\""),
                "line 4",
            ),
            // A fourth number was dropped without a word.
            (
                manifest("").replace("grid = [64, 1, 1]", "grid = [64, 1, 1, 99999]"),
                "line 4: invalid length 4, expected an array of length 3",
            ),
            (
                manifest("").replace("block = [256, 1, 1]", "block = [256, 1, 1, 4096]"),
                "line 5: invalid length 4, expected an array of length 3",
            ),
            (
                manifest("").replace("grid = [64, 1, 1]", "grid = [64, 1]"),
                "line 4: invalid length 2, expected an array of length 3",
            ),
            (
                manifest("").replace("\"zero\"", "\"ones\""),
                "unknown fill `ones`",
            ),
            (
                manifest("").replace("saxpy.ptx", "missing.ptx"),
                "cannot be read",
            ),
            (
                manifest("").replace("entry = \"saxpy\"", "entry = \"daxpy\""),
                "looked for `.entry daxpy(` in the PTX; it defines `saxpy`",
            ),
            (
                manifest("").replace("block = [256, 1, 1]", "block = [1, 1, 65]"),
                "block[2] is 65; accepted: 1 to 64",
            ),
            (
                manifest("").replace(
                    "buffer = 65536, fill = \"zero\"",
                    "buffer = 18446744073709551615",
                ),
                "accepted: 1 byte to 1099511627776 (1 TiB) in all",
            ),
            (
                manifest("").replace("{ f32 = 2.0 }", "{ i32 = 2 }"),
                "args[2] is an i32",
            ),
            (
                manifest("").replace("  { u32 = 16384 },\n", ""),
                "takes 4 parameters",
            ),
            (
                manifest("").replace("app.saxpy", "app saxpy"),
                "name `app saxpy` is not accepted",
            ),
            (manifest("colour = 1\n"), "unknown field `colour`"),
            (
                manifest("").replace("block = [256, 1, 1]", "block = [2048, 1, 1]"),
                "at most 1024",
            ),
            (
                manifest("check = { buffer = 2, sha256 = \"00\" }\n"),
                "not a buffer argument",
            ),
        ];
        for (i, (text, expected)) in cases.iter().enumerate() {
            let path = write(dir.path(), &format!("bad{i}.toml"), text);
            let err = load(&path).unwrap_err();
            assert!(
                err.contains(expected),
                "case {i}: `{err}` lacks `{expected}`"
            );
        }
    }

    #[test]
    fn a_dangling_symlink_is_named_as_one() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("gone.toml");
        std::os::unix::fs::symlink("/nonexistent/k.toml", &link).unwrap();
        let err = load(&link).unwrap_err();
        assert!(
            err.contains("a symbolic link to /nonexistent/k.toml, which does not exist"),
            "{err}"
        );
    }

    #[test]
    fn a_directory_yields_the_good_and_names_the_bad() {
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), "saxpy.ptx", PTX);
        write(dir.path(), "a.toml", &manifest(""));
        write(dir.path(), "b.toml", "name = ");
        write(dir.path(), "notes.txt", "ignored");
        let (loaded, rejected) = load_dirs(&[dir.path().to_path_buf()]);
        assert_eq!(loaded.len(), 1);
        assert_eq!(rejected.len(), 1);
        assert!(rejected[0].0.ends_with("b.toml"), "{rejected:?}");
    }
}

#[cfg(test)]
mod example {
    use super::*;

    /// The README's example: its checksum is y = 2x computed here, so the GPU's output check
    /// compares the kernel against a CPU reference.
    #[test]
    fn the_example_checksum_is_its_cpu_reference() {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("calibration/kernels/example/saxpy.toml");
        let m = load(&path).unwrap();
        let buffers = m.host_buffers().unwrap();
        let y: Vec<u8> = buffers[0]
            .chunks_exact(4)
            .flat_map(|x| (2.0f32 * f32::from_le_bytes([x[0], x[1], x[2], x[3]])).to_le_bytes())
            .collect();
        let Some(OutputCheck::Sha256 {
            sha256: expected, ..
        }) = &m.check
        else {
            panic!("the example has a sha256 check")
        };
        assert_eq!(&sha256(&y), expected);
    }
}
