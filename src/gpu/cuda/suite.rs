//! The host side of the built-in kernel suite: seeded input generators, the sequence of launches
//! each kernel's algorithm needs, which launch is the timed step, and CPU references that the
//! GPU's results are checked against. Pure Rust, no CUDA: everything here is testable without a
//! GPU.
//!
//! A [`Plan`] is `setup` launches (run once, untimed), the timed `step`, and `finish` launches that
//! complete the algorithm so that its result can be compared with the CPU reference. Every timed
//! step reads only buffers it does not write, or its repetition only drifts values without
//! changing the work (gaussian, lud), so timing it N times measures N equal launches.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::gpu::GpuError;

/// The kernels this module knows, with the `extern "C"` entry points their source must define.
pub const ENTRY_POINTS: &[(&str, &[&str])] = &[
    ("needle", &["needle_tile_diagonal"]),
    ("backprop", &["bp_layerforward", "bp_adjust_weights"]),
    ("gaussian", &["gaussian_fan1", "gaussian_fan2"]),
    ("bfs", &["bfs_expand", "bfs_advance"]),
    ("hotspot", &["hotspot_step"]),
    ("lud", &["lud_diagonal", "lud_perimeter", "lud_internal"]),
    ("srad", &["srad_coefficients", "srad_update"]),
    ("tmatch", &["tmatch_ncc"]),
];

const TILE: u32 = 16;

/// A host buffer, uploaded before the plan runs.
#[derive(Debug, Clone, PartialEq)]
pub enum HostBuf {
    F32(Vec<f32>),
    I32(Vec<i32>),
    /// Raw bytes (a manifest's buffers).
    Bytes(Vec<u8>),
}

impl HostBuf {
    pub fn bytes(&self) -> usize {
        match self {
            HostBuf::F32(v) => v.len() * 4,
            HostBuf::I32(v) => v.len() * 4,
            HostBuf::Bytes(v) => v.len(),
        }
    }

    pub fn len(&self) -> usize {
        self.bytes() / 4
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn as_ptr(&self) -> *const std::ffi::c_void {
        match self {
            HostBuf::F32(v) => v.as_ptr().cast(),
            HostBuf::I32(v) => v.as_ptr().cast(),
            HostBuf::Bytes(v) => v.as_ptr().cast(),
        }
    }

    pub fn as_mut_ptr(&mut self) -> *mut std::ffi::c_void {
        match self {
            HostBuf::F32(v) => v.as_mut_ptr().cast(),
            HostBuf::I32(v) => v.as_mut_ptr().cast(),
            HostBuf::Bytes(v) => v.as_mut_ptr().cast(),
        }
    }

    /// A zeroed buffer of this one's type holding `bytes` bytes (rounded down to whole elements).
    pub fn zeroed(&self, bytes: usize) -> HostBuf {
        match self {
            HostBuf::F32(_) => HostBuf::F32(vec![0.0; bytes / 4]),
            HostBuf::I32(_) => HostBuf::I32(vec![0; bytes / 4]),
            HostBuf::Bytes(_) => HostBuf::Bytes(vec![0; bytes]),
        }
    }
}

/// A kernel argument: a device buffer (by index into [`Plan::buffers`]) or a scalar.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Arg {
    Buf(usize),
    I32(i32),
    F32(f32),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Launch {
    pub entry: &'static str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub args: Vec<Arg>,
}

impl Launch {
    fn new(entry: &'static str, grid: [u32; 3], block: [u32; 3], args: Vec<Arg>) -> Self {
        Launch {
            entry,
            grid,
            block,
            args,
        }
    }

    pub fn blocks(&self) -> u32 {
        self.grid.iter().product()
    }

    pub fn threads_per_block(&self) -> u32 {
        self.block.iter().product()
    }
}

/// One buffer to compare with its CPU reference after the plan ran.
#[derive(Debug, Clone, PartialEq)]
pub struct Check {
    pub buffer: usize,
    pub expected: HostBuf,
    /// Allowed `|got - want| <= tol * max(1, |want|)` for floats; integers must match exactly.
    pub tolerance: f32,
    /// Share of elements allowed outside the tolerance (srad's clamped coefficient can flip where
    /// its denominator crosses zero under a different rounding).
    pub allowed_mismatch: f64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub kernel: &'static str,
    pub size: u32,
    pub buffers: Vec<HostBuf>,
    pub setup: Vec<Launch>,
    pub step: Launch,
    pub finish: Vec<Launch>,
    /// Empty unless the plan was made with references.
    pub checks: Vec<Check>,
}

/// The problem size the correctness check runs at: small, so the CPU reference is cheap.
pub fn check_size(kernel: &str) -> u32 {
    match kernel {
        "bfs" => 4096,
        "backprop" => 1024,
        "needle" => 4,
        _ => 64,
    }
}

/// Build the plan of `kernel` at `size` from `seed`; with `reference`, also the expected results.
pub fn plan(kernel: &str, size: u32, seed: u64, reference: bool) -> Result<Plan, GpuError> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ crate::fnv::fnv1a(kernel.as_bytes()));
    let plan = match kernel {
        "needle" => needle(size.max(1), &mut rng, reference),
        "backprop" => backprop(round_up(size, TILE), &mut rng, reference),
        "gaussian" => gaussian(size.max(2), &mut rng, reference),
        "bfs" => bfs(size.max(2), &mut rng, reference),
        "hotspot" => hotspot(size.max(2), &mut rng, reference),
        "lud" => lud(round_up(size, TILE).max(2 * TILE), &mut rng, reference),
        "srad" => srad(size.max(2), &mut rng, reference),
        "tmatch" => tmatch(size.max(2 * TILE), &mut rng, reference),
        other => return Err(GpuError::UnsupportedKernel(other.to_string())),
    };
    Ok(plan)
}

/// Compare what the GPU produced with a check; the error says where and by how much.
pub fn compare(kernel: &str, got: &HostBuf, check: &Check) -> Result<(), GpuError> {
    let wrong = |detail: String| GpuError::WrongResult {
        kernel: kernel.to_string(),
        detail,
    };
    let (mismatches, first) = match (got, &check.expected) {
        (HostBuf::I32(g), HostBuf::I32(w)) if g.len() == w.len() => {
            let bad: Vec<usize> = (0..g.len()).filter(|&i| g[i] != w[i]).collect();
            let first = bad
                .first()
                .map(|&i| format!("[{i}] = {} (expected {})", g[i], w[i]));
            (bad.len(), first)
        }
        (HostBuf::F32(g), HostBuf::F32(w)) if g.len() == w.len() => {
            let off = |i: usize| {
                let (a, b) = (g[i], w[i]);
                !(a == b
                    || (a.is_nan() && b.is_nan())
                    || (a - b).abs() <= check.tolerance * b.abs().max(1.0))
            };
            let bad: Vec<usize> = (0..g.len()).filter(|&i| off(i)).collect();
            let first = bad
                .first()
                .map(|&i| format!("[{i}] = {} (expected {})", g[i], w[i]));
            (bad.len(), first)
        }
        _ => {
            return Err(wrong(format!(
                "buffer {} has the wrong type or length",
                check.buffer
            )))
        }
    };
    let allowed = (check.allowed_mismatch * got.len() as f64).floor() as usize;
    match first {
        Some(first) if mismatches > allowed => Err(wrong(format!(
            "buffer {}: {mismatches} of {} elements differ from the CPU reference (at most {allowed} allowed), first {first}",
            check.buffer,
            got.len()
        ))),
        _ => Ok(()),
    }
}

fn round_up(n: u32, step: u32) -> u32 {
    n.max(1).div_ceil(step) * step
}

fn grid2(cols: u32, rows: u32) -> [u32; 3] {
    [cols.div_ceil(TILE), rows.div_ceil(TILE), 1]
}

fn i(n: u32) -> Arg {
    Arg::I32(n as i32)
}

fn exact(buffer: usize, expected: HostBuf) -> Check {
    Check {
        buffer,
        expected,
        tolerance: 0.0,
        allowed_mismatch: 0.0,
    }
}

fn close(buffer: usize, expected: Vec<f32>, tolerance: f32) -> Check {
    Check {
        buffer,
        expected: HostBuf::F32(expected),
        tolerance,
        allowed_mismatch: 0.0,
    }
}

fn uniform(rng: &mut ChaCha8Rng, len: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..len).map(|_| rng.random_range(lo..hi)).collect()
}

// ---- needle ----------------------------------------------------------------------------------

const NW_PENALTY: i32 = 10;

/// Similarity matrix and the score matrix with its gap-penalty borders, both (n+1) x (n+1).
pub fn needle_inputs(n: u32, rng: &mut ChaCha8Rng) -> (Vec<i32>, Vec<i32>) {
    let w = n as usize + 1;
    let table: Vec<i32> = (0..24 * 24).map(|_| rng.random_range(-4..=11)).collect();
    let a: Vec<usize> = (0..w).map(|_| rng.random_range(0..24)).collect();
    let b: Vec<usize> = (0..w).map(|_| rng.random_range(0..24)).collect();
    let mut reference = vec![0; w * w];
    let mut score = vec![0; w * w];
    for r in 1..w {
        for c in 1..w {
            let (x, y) = (a[r].min(b[c]), a[r].max(b[c]));
            reference[r * w + c] = table[x * 24 + y];
        }
    }
    for k in 0..w {
        score[k] = -(k as i32) * NW_PENALTY;
        score[k * w] = -(k as i32) * NW_PENALTY;
    }
    (reference, score)
}

pub fn needle_reference(n: u32, reference: &[i32], score: &[i32]) -> Vec<i32> {
    let w = n as usize + 1;
    let mut s = score.to_vec();
    for r in 1..w {
        for c in 1..w {
            let diag = s[(r - 1) * w + c - 1] + reference[r * w + c];
            let up = s[(r - 1) * w + c] - NW_PENALTY;
            let left = s[r * w + c - 1] - NW_PENALTY;
            s[r * w + c] = diag.max(up).max(left);
        }
    }
    s
}

/// Length of each aligned sequence: needle's problem size is the number of pairs.
pub const NW_LEN: u32 = 64;

fn needle(pairs: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let n = NW_LEN;
    let cells = (n as usize + 1).pow(2) * pairs as usize;
    let (mut sims, mut scores) = (Vec::with_capacity(cells), Vec::with_capacity(cells));
    let mut expected = Vec::new();
    for _ in 0..pairs {
        let (sim, score) = needle_inputs(n, rng);
        if reference {
            expected.extend(needle_reference(n, &sim, &score));
        }
        sims.extend(sim);
        scores.extend(score);
    }
    let tiles = n / TILE;
    let diag = |d: u32| {
        let first = d.saturating_sub(tiles - 1);
        let last = d.min(tiles - 1);
        let args = vec![Arg::Buf(1), Arg::Buf(0), i(n), Arg::I32(NW_PENALTY), i(d)];
        Launch::new(
            "needle_tile_diagonal",
            [last - first + 1, pairs, 1],
            [TILE, 1, 1],
            args,
        )
    };
    let checks = if reference {
        vec![exact(1, HostBuf::I32(expected))]
    } else {
        Vec::new()
    };
    Plan {
        kernel: "needle",
        size: pairs,
        buffers: vec![HostBuf::I32(sims), HostBuf::I32(scores)],
        setup: (0..tiles - 1).map(diag).collect(),
        step: diag(tiles - 1),
        finish: (tiles..2 * tiles - 1).map(diag).collect(),
        checks,
    }
}

// ---- backprop --------------------------------------------------------------------------------

const BP_HIDDEN: usize = 16;
const BP_ETA: f32 = 0.3;
const BP_MOMENTUM: f32 = 0.3;

/// Partial sums of the forward pass (one per block of 16 inputs and hidden unit) and the
/// adjusted weights, as the GPU computes them.
pub fn backprop_reference(
    input: &[f32],
    weights: &[f32],
    old: &[f32],
    delta: &[f32],
) -> (Vec<f32>, Vec<f32>) {
    let blocks = input.len() / BP_HIDDEN;
    let mut partial = vec![0.0f32; blocks * BP_HIDDEN];
    for b in 0..blocks {
        for h in 0..BP_HIDDEN {
            let mut prod: Vec<f32> = (0..BP_HIDDEN)
                .map(|t| input[b * BP_HIDDEN + t] * weights[(b * BP_HIDDEN + t) * BP_HIDDEN + h])
                .collect();
            let mut stride = BP_HIDDEN / 2;
            while stride > 0 {
                for t in 0..stride {
                    prod[t] += prod[t + stride];
                }
                stride /= 2;
            }
            partial[b * BP_HIDDEN + h] = prod[0];
        }
    }
    let adjusted = (0..weights.len())
        .map(|k| {
            weights[k]
                + (BP_ETA * delta[k % BP_HIDDEN] * input[k / BP_HIDDEN] + BP_MOMENTUM * old[k])
        })
        .collect();
    (partial, adjusted)
}

fn backprop(n: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let len = n as usize;
    let input = uniform(rng, len, 0.0, 1.0);
    let weights = uniform(rng, len * BP_HIDDEN, -1.0, 1.0);
    let old = uniform(rng, len * BP_HIDDEN, -0.05, 0.05);
    let delta = uniform(rng, BP_HIDDEN, -0.5, 0.5);
    let blocks = n / TILE;
    let checks = if reference {
        let (partial, adjusted) = backprop_reference(&input, &weights, &old, &delta);
        vec![close(2, partial, 1e-4), close(1, adjusted, 1e-4)]
    } else {
        Vec::new()
    };
    let forward = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), i(n)];
    let adjust = vec![
        Arg::Buf(1),
        Arg::Buf(3),
        Arg::Buf(4),
        Arg::Buf(0),
        i(n),
        Arg::F32(BP_ETA),
        Arg::F32(BP_MOMENTUM),
    ];
    Plan {
        kernel: "backprop",
        size: n,
        buffers: vec![
            HostBuf::F32(input),
            HostBuf::F32(weights),
            HostBuf::F32(vec![0.0; len]),
            HostBuf::F32(old),
            HostBuf::F32(delta),
        ],
        setup: Vec::new(),
        step: Launch::new("bp_layerforward", [blocks, 1, 1], [TILE, TILE, 1], forward),
        finish: vec![Launch::new(
            "bp_adjust_weights",
            [blocks, 1, 1],
            [TILE, TILE, 1],
            adjust,
        )],
        checks,
    }
}

// ---- gaussian --------------------------------------------------------------------------------

/// A diagonally dominant system, so elimination without pivoting is stable.
pub fn gaussian_inputs(n: u32, rng: &mut ChaCha8Rng) -> (Vec<f32>, Vec<f32>) {
    let n = n as usize;
    let mut a = uniform(rng, n * n, -1.0, 1.0);
    for d in 0..n {
        a[d * n + d] += n as f32;
    }
    (a, uniform(rng, n, -1.0, 1.0))
}

/// The upper-triangular matrix and right-hand side after forward elimination.
pub fn gaussian_reference(n: u32, a: &[f32], b: &[f32]) -> (Vec<f32>, Vec<f32>) {
    let n = n as usize;
    let (mut a, mut b) = (a.to_vec(), b.to_vec());
    for t in 0..n - 1 {
        for r in t + 1..n {
            let m = a[r * n + t] / a[t * n + t];
            for c in t..n {
                a[r * n + c] -= m * a[t * n + c];
            }
            b[r] -= m * b[t];
        }
    }
    (a, b)
}

fn gaussian(n: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let (a, b) = gaussian_inputs(n, rng);
    let fan1 = |t: u32| {
        let args = vec![Arg::Buf(0), Arg::Buf(2), i(n), i(t)];
        Launch::new(
            "gaussian_fan1",
            [(n - t - 1).div_ceil(256), 1, 1],
            [256, 1, 1],
            args,
        )
    };
    let fan2 = |t: u32| {
        let args = vec![Arg::Buf(0), Arg::Buf(1), Arg::Buf(2), i(n), i(t)];
        Launch::new("gaussian_fan2", grid2(n, n - t - 1), [TILE, TILE, 1], args)
    };
    let checks = if reference {
        let (ra, rb) = gaussian_reference(n, &a, &b);
        vec![close(0, ra, 1e-3), close(1, rb, 1e-3)]
    } else {
        Vec::new()
    };
    let len = (n * n) as usize;
    Plan {
        kernel: "gaussian",
        size: n,
        buffers: vec![
            HostBuf::F32(a),
            HostBuf::F32(b),
            HostBuf::F32(vec![0.0; len]),
        ],
        setup: vec![fan1(0)],
        step: fan2(0),
        finish: (1..n - 1).flat_map(|t| [fan1(t), fan2(t)]).collect(),
        checks,
    }
}

// ---- bfs -------------------------------------------------------------------------------------

/// A random graph in CSR form: every node has 1 to 8 edges to uniformly chosen nodes.
pub fn bfs_graph(nodes: u32, rng: &mut ChaCha8Rng) -> (Vec<i32>, Vec<i32>) {
    let mut offsets = Vec::with_capacity(nodes as usize + 1);
    let mut edges = Vec::new();
    offsets.push(0);
    for _ in 0..nodes {
        let degree = rng.random_range(1..=8);
        edges.extend((0..degree).map(|_| rng.random_range(0..nodes) as i32));
        offsets.push(edges.len() as i32);
    }
    (offsets, edges)
}

/// BFS cost (level) of every node from node 0, -1 where unreachable.
pub fn bfs_reference(offsets: &[i32], edges: &[i32]) -> Vec<i32> {
    let nodes = offsets.len() - 1;
    let mut cost = vec![-1; nodes];
    cost[0] = 0;
    let mut frontier = vec![0usize];
    while !frontier.is_empty() {
        let mut next = Vec::new();
        for &v in &frontier {
            for &w in &edges[offsets[v] as usize..offsets[v + 1] as usize] {
                if cost[w as usize] < 0 {
                    cost[w as usize] = cost[v] + 1;
                    next.push(w as usize);
                }
            }
        }
        frontier = next;
    }
    cost
}

fn bfs(nodes: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let (offsets, edges) = bfs_graph(nodes, rng);
    let cost = bfs_reference(&offsets, &edges);
    let max_level = cost.iter().copied().max().unwrap_or(0).max(0);
    let mut per_level = vec![0usize; max_level as usize + 1];
    cost.iter()
        .filter(|&&c| c >= 0)
        .for_each(|&c| per_level[c as usize] += 1);
    // Expanding the last level finds nothing new, so the timed level is one with successors.
    let widest = (0..max_level.max(1) as usize)
        .max_by_key(|&l| per_level[l])
        .unwrap_or(0);
    let blocks = [nodes.div_ceil(256), 1, 1];
    let expand = Launch::new(
        "bfs_expand",
        blocks,
        [256, 1, 1],
        vec![
            Arg::Buf(0),
            Arg::Buf(1),
            Arg::Buf(2),
            Arg::Buf(3),
            Arg::Buf(4),
            Arg::Buf(5),
            i(nodes),
        ],
    );
    let advance = Launch::new(
        "bfs_advance",
        blocks,
        [256, 1, 1],
        vec![Arg::Buf(2), Arg::Buf(3), Arg::Buf(5), i(nodes)],
    );
    let level = |_| [expand.clone(), advance.clone()];
    let mut start = vec![0; nodes as usize];
    start[0] = 1;
    let mut initial_cost = vec![-1; nodes as usize];
    initial_cost[0] = 0;
    let mut finish = vec![advance.clone()];
    finish.extend((widest + 1..max_level as usize).flat_map(level));
    Plan {
        kernel: "bfs",
        size: nodes,
        buffers: vec![
            HostBuf::I32(offsets),
            HostBuf::I32(edges),
            HostBuf::I32(start.clone()),
            HostBuf::I32(start),
            HostBuf::I32(initial_cost),
            HostBuf::I32(vec![0; nodes as usize]),
        ],
        setup: (0..widest).flat_map(level).collect(),
        step: expand.clone(),
        finish,
        checks: if reference {
            vec![exact(4, HostBuf::I32(cost))]
        } else {
            Vec::new()
        },
    }
}

// ---- hotspot ---------------------------------------------------------------------------------

/// Rodinia's chip constants folded into (k_step, 1/rx, 1/ry, 1/rz) for an n x n grid.
pub fn hotspot_coefficients(n: u32) -> [f32; 4] {
    let (chip, t_chip, factor, spec_heat, k_si, max_pd, precision) = (
        0.016f64, 0.0005f64, 0.5f64, 1.75e6f64, 100.0f64, 3.0e6f64, 0.001f64,
    );
    let (gw, gh) = (chip / f64::from(n), chip / f64::from(n));
    let cap = factor * spec_heat * t_chip * gw * gh;
    let rx = gw / (2.0 * k_si * t_chip * gh);
    let ry = gh / (2.0 * k_si * t_chip * gw);
    let rz = t_chip / (k_si * gh * gw);
    let step = precision / (max_pd / (factor * t_chip * spec_heat));
    [
        (step / cap) as f32,
        (1.0 / rx) as f32,
        (1.0 / ry) as f32,
        (1.0 / rz) as f32,
    ]
}

const AMBIENT: f32 = 80.0;

pub fn hotspot_reference(n: u32, temp: &[f32], power: &[f32]) -> Vec<f32> {
    let [k, irx, iry, irz] = hotspot_coefficients(n);
    let n = n as usize;
    let at = |r: usize, c: usize| temp[r * n + c];
    (0..n * n)
        .map(|idx| {
            let (r, c) = (idx / n, idx % n);
            let t = temp[idx];
            let (no, so) = (at(r.saturating_sub(1), c), at((r + 1).min(n - 1), c));
            let (we, ea) = (at(r, c.saturating_sub(1)), at(r, (c + 1).min(n - 1)));
            t + k
                * (power[idx]
                    + (no + so - 2.0 * t) * iry
                    + (ea + we - 2.0 * t) * irx
                    + (AMBIENT - t) * irz)
        })
        .collect()
}

fn hotspot(n: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let len = (n * n) as usize;
    let temp = uniform(rng, len, 323.0, 343.0);
    let power = uniform(rng, len, 0.0, 0.5);
    let [k, irx, iry, irz] = hotspot_coefficients(n);
    let checks = if reference {
        vec![close(2, hotspot_reference(n, &temp, &power), 1e-4)]
    } else {
        Vec::new()
    };
    let args = vec![
        Arg::Buf(0),
        Arg::Buf(1),
        Arg::Buf(2),
        i(n),
        i(n),
        Arg::F32(k),
        Arg::F32(irx),
        Arg::F32(iry),
        Arg::F32(irz),
        Arg::F32(AMBIENT),
    ];
    Plan {
        kernel: "hotspot",
        size: n,
        buffers: vec![
            HostBuf::F32(temp),
            HostBuf::F32(power),
            HostBuf::F32(vec![0.0; len]),
        ],
        setup: Vec::new(),
        step: Launch::new("hotspot_step", grid2(n, n), [TILE, TILE, 1], args),
        finish: Vec::new(),
        checks,
    }
}

// ---- lud -------------------------------------------------------------------------------------

/// In-place Doolittle LU without pivoting: unit-lower L below the diagonal, U on and above.
pub fn lud_reference(n: u32, a: &[f32]) -> Vec<f32> {
    let n = n as usize;
    let mut a = a.to_vec();
    for k in 0..n {
        for r in k + 1..n {
            a[r * n + k] /= a[k * n + k];
            for c in k + 1..n {
                a[r * n + c] -= a[r * n + k] * a[k * n + c];
            }
        }
    }
    a
}

fn lud(n: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let (a, _) = gaussian_inputs(n, rng);
    let tiles = n / TILE;
    let block = [TILE, TILE, 1];
    let args = |kb: u32| vec![Arg::Buf(0), i(n), i(kb * TILE)];
    let diagonal = |kb: u32| Launch::new("lud_diagonal", [1, 1, 1], block, args(kb));
    let perimeter = |kb: u32| Launch::new("lud_perimeter", [tiles - kb - 1, 2, 1], block, args(kb));
    let internal = |kb: u32| {
        Launch::new(
            "lud_internal",
            [tiles - kb - 1, tiles - kb - 1, 1],
            block,
            args(kb),
        )
    };
    let mut finish: Vec<Launch> = (1..tiles - 1)
        .flat_map(|kb| [diagonal(kb), perimeter(kb), internal(kb)])
        .collect();
    finish.push(diagonal(tiles - 1));
    let checks = if reference {
        vec![close(0, lud_reference(n, &a), 1e-3)]
    } else {
        Vec::new()
    };
    Plan {
        kernel: "lud",
        size: n,
        buffers: vec![HostBuf::F32(a)],
        setup: vec![diagonal(0), perimeter(0)],
        step: internal(0),
        finish,
        checks,
    }
}

// ---- srad ------------------------------------------------------------------------------------

const SRAD_LAMBDA: f32 = 0.5;

/// An exponentiated speckle image (as Rodinia loads it) and its q0sqr = variance / mean^2.
pub fn srad_inputs(n: u32, rng: &mut ChaCha8Rng) -> (Vec<f32>, f32) {
    let img: Vec<f32> = (0..(n * n) as usize)
        .map(|_| (rng.random_range(0.0f32..255.0) / 255.0).exp())
        .collect();
    let len = img.len() as f64;
    let mean = img.iter().map(|&v| f64::from(v)).sum::<f64>() / len;
    let var = img
        .iter()
        .map(|&v| (f64::from(v) - mean).powi(2))
        .sum::<f64>()
        / len;
    (img, (var / (mean * mean)) as f32)
}

/// The coefficients of pass one and the image after pass two.
pub fn srad_reference(n: u32, img: &[f32], q0sqr: f32) -> (Vec<f32>, Vec<f32>) {
    let n = n as usize;
    let at = |v: &[f32], r: usize, c: usize| v[r * n + c];
    let mut d = vec![[0.0f32; 4]; n * n];
    let mut coef = vec![0.0f32; n * n];
    for k in 0..n * n {
        let (y, x, jc) = (k / n, k % n, img[k]);
        let no = at(img, y.saturating_sub(1), x) - jc;
        let so = at(img, (y + 1).min(n - 1), x) - jc;
        let we = at(img, y, x.saturating_sub(1)) - jc;
        let ea = at(img, y, (x + 1).min(n - 1)) - jc;
        let g2 = (no * no + so * so + we * we + ea * ea) / (jc * jc);
        let l = (no + so + we + ea) / jc;
        let num = 0.5 * g2 - 0.0625 * l * l;
        let den = 1.0 + 0.25 * l;
        let qsqr = num / (den * den);
        let q = (qsqr - q0sqr) / (q0sqr * (1.0 + q0sqr));
        d[k] = [no, so, we, ea];
        // max/min, not clamp: a NaN becomes 0 as with the kernel's fmaxf/fminf.
        #[allow(clippy::manual_clamp)]
        let c = (1.0 / (1.0 + q)).max(0.0).min(1.0);
        coef[k] = c;
    }
    let out = (0..n * n)
        .map(|k| {
            let (y, x) = (k / n, k % n);
            let (cn, cw) = (coef[k], coef[k]);
            let cs = at(&coef, (y + 1).min(n - 1), x);
            let ce = at(&coef, y, (x + 1).min(n - 1));
            let [no, so, we, ea] = d[k];
            img[k] + 0.25 * SRAD_LAMBDA * (cn * no + cs * so + cw * we + ce * ea)
        })
        .collect();
    (coef, out)
}

fn srad(n: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let (img, q0sqr) = srad_inputs(n, rng);
    let len = img.len();
    let checks = if reference {
        let (coef, out) = srad_reference(n, &img, q0sqr);
        let tolerant = |buffer, v| Check {
            allowed_mismatch: 0.002,
            ..close(buffer, v, 1e-3)
        };
        vec![tolerant(5, coef), tolerant(0, out)]
    } else {
        Vec::new()
    };
    let bufs: Vec<Arg> = (0..6).map(Arg::Buf).collect();
    let mut first = bufs.clone();
    first.extend([i(n), i(n), Arg::F32(q0sqr)]);
    let mut second = bufs;
    second.extend([i(n), i(n), Arg::F32(SRAD_LAMBDA)]);
    let mut buffers = vec![HostBuf::F32(img)];
    buffers.extend((0..5).map(|_| HostBuf::F32(vec![0.0; len])));
    Plan {
        kernel: "srad",
        size: n,
        buffers,
        setup: Vec::new(),
        step: Launch::new("srad_coefficients", grid2(n, n), [TILE, TILE, 1], first),
        finish: vec![Launch::new(
            "srad_update",
            grid2(n, n),
            [TILE, TILE, 1],
            second,
        )],
        checks,
    }
}

// ---- tmatch ----------------------------------------------------------------------------------

const TM_SIDE: usize = 16;

/// A random image and a template cut from it with a little noise, so a clear match exists.
pub fn tmatch_inputs(n: u32, rng: &mut ChaCha8Rng) -> (Vec<f32>, Vec<f32>) {
    let n = n as usize;
    let image = uniform(rng, n * n, 0.0, 1.0);
    let (y0, x0) = (
        rng.random_range(0..=n - TM_SIDE),
        rng.random_range(0..=n - TM_SIDE),
    );
    let tmpl = (0..TM_SIDE * TM_SIDE)
        .map(|k| {
            image[(y0 + k / TM_SIDE) * n + x0 + k % TM_SIDE] + rng.random_range(-0.05f32..0.05)
        })
        .collect();
    (image, tmpl)
}

fn template_sums(tmpl: &[f32]) -> (f32, f32) {
    (tmpl.iter().sum(), tmpl.iter().map(|v| v * v).sum())
}

pub fn tmatch_reference(n: u32, image: &[f32], tmpl: &[f32]) -> Vec<f32> {
    let n = n as usize;
    let m = n - TM_SIDE + 1;
    let (ts, tss) = template_sums(tmpl);
    let inv = 1.0 / (TM_SIDE * TM_SIDE) as f32;
    (0..m * m)
        .map(|k| {
            let (y, x) = (k / m, k % m);
            let (mut si, mut sii, mut sit) = (0.0f32, 0.0f32, 0.0f32);
            for u in 0..TM_SIDE {
                for v in 0..TM_SIDE {
                    let p = image[(y + u) * n + x + v];
                    si += p;
                    sii += p * p;
                    sit += p * tmpl[u * TM_SIDE + v];
                }
            }
            let den = ((sii - si * si * inv) * (tss - ts * ts * inv)).sqrt();
            if den > 0.0 {
                (sit - si * ts * inv) / den
            } else {
                0.0
            }
        })
        .collect()
}

fn tmatch(n: u32, rng: &mut ChaCha8Rng, reference: bool) -> Plan {
    let (image, tmpl) = tmatch_inputs(n, rng);
    let (ts, tss) = template_sums(&tmpl);
    let m = n - TM_SIDE as u32 + 1;
    let checks = if reference {
        vec![close(2, tmatch_reference(n, &image, &tmpl), 2e-3)]
    } else {
        Vec::new()
    };
    let args = vec![
        Arg::Buf(0),
        Arg::Buf(1),
        Arg::Buf(2),
        i(n),
        Arg::F32(ts),
        Arg::F32(tss),
    ];
    Plan {
        kernel: "tmatch",
        size: n,
        buffers: vec![
            HostBuf::F32(image),
            HostBuf::F32(tmpl),
            HostBuf::F32(vec![0.0; (m * m) as usize]),
        ],
        setup: Vec::new(),
        step: Launch::new("tmatch_ncc", grid2(m, m), [TILE, TILE, 1], args),
        finish: Vec::new(),
        checks,
    }
}

#[cfg(test)]
mod tests;
