//! Static features of a kernel from its PTX text: the instruction mix of one thread, which times
//! the grid gives the launch's FLOPs and global-memory bytes. A pure function of the text, so the
//! CUDA backend can hand over what NVRTC compiled and the model never touches a GPU.
//!
//! Counts are static: each instruction once, as if every branch were taken once and every loop
//! ran once. A kernel with a backward branch (a loop) does more than this; [`PtxFeatures::loops`]
//! says so, and a prediction built on the counts is then a lower estimate of the work.

use std::collections::BTreeMap;

use crate::ptx_text;

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct PtxFeatures {
    pub entry: String,
    /// Executable instructions in the body.
    pub instructions: u64,
    /// Floating-point operations of one thread (a fused multiply-add counts 2).
    pub flops_per_thread: f64,
    /// Bytes one thread loads from and stores to global memory.
    pub global_bytes_per_thread: f64,
    /// Atomic and reduction operations on global memory of one thread.
    pub atomics_per_thread: f64,
    /// Shared-memory loads and stores of one thread.
    pub shared_accesses_per_thread: f64,
    /// Statically declared shared memory of one block.
    pub static_shared_bytes: u64,
    /// Whether the body has a backward branch: the counts are then per iteration.
    pub loops: bool,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PtxError {
    #[error("no `.entry {entry}` in the PTX; entries found: {found}")]
    NoEntry { entry: String, found: String },
    #[error("`.entry {0}` has no body between braces")]
    NoBody(String),
}

/// Every entry point of a module, in order.
pub fn entries(ptx: &str) -> Vec<String> {
    ptx_text::entries(&ptx_text::without_comments(ptx))
        .into_iter()
        .map(|e| e.name.to_string())
        .collect()
}

/// Features of `entry` in `ptx`.
pub fn features(ptx: &str, entry: &str) -> Result<PtxFeatures, PtxError> {
    let body = entry_body(ptx, entry)?;
    let mut f = PtxFeatures {
        entry: entry.to_string(),
        ..Default::default()
    };
    let (statements, labels) = statements_and_labels(&body);
    for (i, &line) in statements.iter().enumerate() {
        f.add_statement(i, line, &labels);
    }
    Ok(f)
}

/// The body of `entry` in `ptx`, without comments and without the directives that end at their
/// line, so that every statement in it ends with `;`.
fn entry_body(ptx: &str, entry: &str) -> Result<String, PtxError> {
    let found = entries(ptx);
    if !found.iter().any(|e| e == entry) {
        return Err(PtxError::NoEntry {
            entry: entry.to_string(),
            found: if found.is_empty() {
                "none".into()
            } else {
                found.join(", ")
            },
        });
    }
    let text = ptx_text::without_comments(ptx);
    let body = ptx_text::entries(&text)
        .into_iter()
        .find_map(|e| e.body.filter(|_| e.name == entry))
        .ok_or_else(|| PtxError::NoBody(entry.to_string()))?;
    // Directives without a `;` (`.loc`, `.file`, `.section`) end at their line.
    Ok(body
        .lines()
        .filter(|l| {
            let t = l.trim();
            !t.starts_with('.') || t.contains(';')
        })
        .collect::<Vec<_>>()
        .join("\n"))
}

/// The statements of `body`, their labels stripped, and the statement each label leads (its
/// index): what a branch's target is looked up in to tell a loop.
///
/// Statements end with `;`, whatever the lines; labels and scope braces lead a statement.
fn statements_and_labels(body: &str) -> (Vec<&str>, BTreeMap<&str, usize>) {
    let mut labels: BTreeMap<&str, usize> = BTreeMap::new();
    let statements: Vec<&str> = body
        .split(';')
        .enumerate()
        .map(|(i, s)| {
            let (found, rest) = split_labels(s);
            for label in found {
                labels.insert(label, i);
            }
            rest
        })
        .collect();
    (statements, labels)
}

impl PtxFeatures {
    /// Counts statement `i` (`line`, labels stripped): a `.shared` declaration's bytes, or an
    /// instruction, and a branch back to a label at or before it as a loop.
    fn add_statement(&mut self, i: usize, line: &str, labels: &BTreeMap<&str, usize>) {
        if line.is_empty() {
            return;
        }
        if line.starts_with('.') {
            if line.starts_with(".shared") {
                self.static_shared_bytes += declared_bytes(line);
            }
            return;
        }
        // A guard predicate (`@%p1 bra ...`) does not change what the instruction is.
        let line = match line.strip_prefix('@') {
            Some(rest) => rest
                .split_once(char::is_whitespace)
                .map_or("", |(_, r)| r.trim()),
            None => line,
        };
        let mut parts = line.split_whitespace();
        let Some(op) = parts.next() else { return };
        self.instructions += 1;
        if op.starts_with("bra") {
            let target = parts.next().unwrap_or("").trim_end_matches(';');
            if labels.get(target).is_some_and(|&at| at <= i) {
                self.loops = true;
            }
            return;
        }
        count(op, self);
    }
}

/// A statement's leading labels (`$L1:`) and scope braces stripped: (labels, the rest).
fn split_labels(statement: &str) -> (Vec<&str>, &str) {
    let mut labels = Vec::new();
    let mut rest = statement;
    loop {
        rest = rest.trim_start_matches(|c: char| c == '{' || c == '}' || c.is_whitespace());
        let name = rest
            .find(|c: char| !ptx_text::identifier_char(c))
            .unwrap_or(rest.len());
        match rest[name..].trim_start().strip_prefix(':') {
            Some(after) if name > 0 => {
                labels.push(&rest[..name]);
                rest = after;
            }
            _ => return (labels, rest.trim()),
        }
    }
}

/// Bytes of one `.shared ... name[N]` declaration.
fn declared_bytes(line: &str) -> u64 {
    if line.contains(".extern") {
        return 0;
    }
    let elem = type_bytes(line).unwrap_or(1);
    let count = line
        .rsplit_once('[')
        .and_then(|(_, r)| r.split(']').next())
        .and_then(|n| n.trim().parse::<u64>().ok())
        .unwrap_or(1);
    elem * count
}

/// Size of the scalar type named among `.`-separated modifiers, times a `.v2`/`.v4` vector width.
fn type_bytes(op: &str) -> Option<u64> {
    let mut width = 1;
    let mut size = None;
    for m in op.split(|c: char| c == '.' || c.is_whitespace()) {
        match m {
            "v2" => width = 2,
            "v4" => width = 4,
            "b8" | "u8" | "s8" => size = Some(1),
            "b16" | "u16" | "s16" | "f16" | "bf16" => size = Some(2),
            "b32" | "u32" | "s32" | "f32" | "f16x2" | "bf16x2" => size = Some(4),
            "b64" | "u64" | "s64" | "f64" => size = Some(8),
            "b128" => size = Some(16),
            _ => {}
        }
    }
    size.map(|s| s * width)
}

fn is_float(op: &str) -> bool {
    op.split('.')
        .any(|m| matches!(m, "f32" | "f64" | "f16" | "f16x2" | "bf16" | "bf16x2"))
}

fn count(op: &str, f: &mut PtxFeatures) {
    let base = op.split('.').next().unwrap_or("");
    let space = |s: &str| op.split('.').any(|m| m == s);
    match base {
        "ld" | "ldu" | "st" if space("global") => {
            f.global_bytes_per_thread += type_bytes(op).unwrap_or(4) as f64
        }
        "ld" | "st" if space("shared") => f.shared_accesses_per_thread += 1.0,
        "atom" | "red" if space("global") || !space("shared") => f.atomics_per_thread += 1.0,
        "fma" | "mad" if is_float(op) => {
            let lanes = if op.contains("x2") { 2.0 } else { 1.0 };
            f.flops_per_thread += 2.0 * lanes
        }
        "add" | "sub" | "mul" | "div" | "rcp" | "sqrt" | "rsqrt" | "ex2" | "lg2" | "sin"
        | "cos" | "tanh" | "min" | "max"
            if is_float(op) =>
        {
            f.flops_per_thread += if op.contains("x2") { 2.0 } else { 1.0 }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAXPY: &str = r#"
.version 8.0
.target sm_90
.address_size 64

.visible .entry saxpy(
	.param .f32 saxpy_param_0,
	.param .u64 saxpy_param_1,
	.param .u64 saxpy_param_2,
	.param .u32 saxpy_param_3
)
{
	.reg .pred 	%p<2>;
	.reg .f32 	%f<5>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<8>;

	ld.param.f32 	%f1, [saxpy_param_0];
	ld.param.u64 	%rd1, [saxpy_param_1];
	mov.u32 	%r2, %ntid.x;
	mad.lo.s32 	%r4, %r1, %r2, %r3;
	setp.ge.s32 	%p1, %r4, %r5;
	@%p1 bra 	$L__BB0_2;
	cvta.to.global.u64 	%rd3, %rd1;
	ld.global.nc.f32 	%f2, [%rd5];
	ld.global.f32 	%f3, [%rd7];
	fma.rn.f32 	%f4, %f2, %f1, %f3;
	st.global.f32 	[%rd7], %f4;   // y = a*x + y
$L__BB0_2:
	ret;
}

.visible .entry tiled(
	.param .u64 tiled_param_0
)
{
	.reg .b32 	%r<9>;
	.reg .f32 	%f<9>;
	.shared .align 4 .b8 _ZZ5tiledE4tile[4096];

$L__BB1_1:
	ld.shared.f32 	%f1, [%r1];
	ld.global.v4.f32 	{%f2, %f3, %f4, %f5}, [%rd1];
	add.f32 	%f6, %f1, %f2;
	atom.global.add.u32 	%r2, [%rd2], 1;
	bar.sync 	0;
	setp.lt.u32 	%p1, %r3, 16;
	@%p1 bra 	$L__BB1_1;
	ret;
}
"#;

    #[test]
    fn a_straight_line_kernel_is_counted_exactly() {
        let f = features(SAXPY, "saxpy").unwrap();
        assert_eq!(f.flops_per_thread, 2.0, "one fma; mad.lo.s32 is integer");
        assert_eq!(
            f.global_bytes_per_thread, 12.0,
            "two 4-byte loads and one store"
        );
        assert!(!f.loops);
        assert_eq!(f.static_shared_bytes, 0);
        assert_eq!(f.instructions, 12);
    }

    #[test]
    fn loops_vectors_atomics_and_shared_memory_are_seen() {
        let f = features(SAXPY, "tiled").unwrap();
        assert!(f.loops, "the branch goes back to $L__BB1_1");
        assert_eq!(f.global_bytes_per_thread, 16.0);
        assert_eq!(f.atomics_per_thread, 1.0);
        assert_eq!(f.shared_accesses_per_thread, 1.0);
        assert_eq!(f.static_shared_bytes, 4096);
        assert_eq!(f.flops_per_thread, 1.0);
    }

    #[test]
    fn an_unknown_entry_names_the_ones_there_are() {
        assert_eq!(entries(SAXPY), ["saxpy", "tiled"]);
        let e = features(SAXPY, "sax").unwrap_err().to_string();
        assert!(e.contains("saxpy, tiled"), "{e}");
    }

    /// Layouts a compiler or a hand may write: the body is the one after the entry's own
    /// parameters, whatever the lines; a name is matched whole (`$` included); comments count
    /// nothing; a label may share its line with the statements after it.
    #[test]
    fn the_body_is_the_entrys_own_whatever_the_layout() {
        const ONE_FMA: &str =
            "ld.global.f32 %f1, [%rd1]; fma.rn.f32 %f2, %f1, %f1, %f1; st.global.f32 [%rd1], %f2;";
        let counts = |ptx: &str, entry: &str| {
            let f = features(ptx, entry).unwrap();
            (f.flops_per_thread, f.global_bytes_per_thread, f.loops)
        };
        // The brace on the signature's line, and a busier entry after it.
        let ptx = format!(".visible .entry first(.param .u64 a, .param .u32 n) {{\n\tret;\n}}\n.visible .entry second(\n.param .u64 b\n)\n{{\n{ONE_FMA}\n\tret;\n}}\n");
        assert_eq!(counts(&ptx, "first"), (0.0, 0.0, false));
        assert_eq!(counts(&ptx, "second"), (2.0, 8.0, false));
        // A comment after the brace; `{` and instructions in comments are not code.
        let ptx = format!(".entry sp(.param .u64 a)\n{{   // body {{\n{ONE_FMA}\n/* fma.rn.f64 %fd1, %fd1, %fd1, %fd1;\n }} */\n\tret;\n}}\n.entry other()\n{{\n\tret;\n}}\n");
        assert_eq!(counts(&ptx, "sp"), (2.0, 8.0, false));
        assert_eq!(entries(&ptx), ["sp", "other"]);
        // `k$1` is not `k`.
        let ptx = format!(".entry k$1(.param .u64 a)\n{{\n{ONE_FMA}\n\tret;\n}}\n.entry k(.param .u64 a)\n{{\n\tret;\n}}\n");
        assert_eq!(counts(&ptx, "k"), (0.0, 0.0, false));
        assert_eq!(counts(&ptx, "k$1"), (2.0, 8.0, false));
        // A label on the line of the loop's body, and a branch back to it.
        let ptx =
            format!(".entry odd(.param .u64 a)\n{{\n$L1: {ONE_FMA}\n@%p1 bra $L1;\n\tret;\n}}\n");
        assert_eq!(counts(&ptx, "odd"), (2.0, 8.0, true));
        // Line information (`-lineinfo`) before an instruction hides nothing.
        let ptx = format!(".entry loc(.param .u64 a)\n{{\n.loc 1 5 3\n{ONE_FMA}\n\tret;\n}}\n");
        assert_eq!(counts(&ptx, "loc"), (2.0, 8.0, false));
        // A forward branch is not a loop.
        let ptx =
            format!(".entry fwd(.param .u64 a)\n{{\n@%p1 bra $L2;\n{ONE_FMA}\n$L2:\n\tret;\n}}\n");
        assert_eq!(counts(&ptx, "fwd"), (2.0, 8.0, false));
    }
}
