//! The samples and geometry CSV formats of the design notes: what a campaign records and what
//! offline tools read. Readers refuse a malformed file whole, with the line and the field that was
//! wrong and what is accepted; nothing is half-read.
//!
//! Samples: header `kernel,sms,time_ns` (extra columns allowed and ignored), one row per launch.
//! Geometry: header `kernel,blocks,blocks_per_sm`.

use std::collections::BTreeMap;
use std::io::{Read, Write};

use crate::kernels::Geometry;

/// Samples per kernel, per partition size, in file (launch) order.
pub type SampleSet = BTreeMap<String, BTreeMap<u32, Vec<u64>>>;

#[derive(Debug, thiserror::Error)]
pub enum CsvError {
    #[error("{what}: missing column `{column}`; the header must name {expected}")]
    MissingColumn {
        what: &'static str,
        column: &'static str,
        expected: &'static str,
    },
    #[error("{what}, line {line}: `{field}` is `{value}`; accepted: {accepted}")]
    BadValue {
        what: &'static str,
        line: u64,
        field: &'static str,
        value: String,
        accepted: &'static str,
    },
    #[error("{what}, line {line}: {detail}")]
    Malformed {
        what: &'static str,
        line: u64,
        detail: String,
    },
    #[error("{what}: no rows after the header")]
    Empty { what: &'static str },
}

const SAMPLES: &str = "samples CSV";

/// The longest launch time a samples file may hold: one hour, as reports and imports keep.
/// Longer is a unit mistake, not a GPU kernel, and near `u64::MAX` a bound would saturate.
pub const MAX_TIME_NS: u64 = 3_600_000_000_000;
const GEOMETRY: &str = "geometry CSV";

/// A CSV reader as every offline input is read: fields trimmed, and every line ending (CRLF, or a
/// lone CR as old Mac tools write) read as LF. The csv crate ends a CRLF record at its `\r` and
/// counts the `\n` only while reading the next one, so every line it named after the header was
/// one too low ("line 4" for a bad value on line 5 of the shipped, CRLF, `runs_4070.csv`), and it
/// counts no line at all in a CR-only file ("line 1" everywhere); with LF it counts right. (Byte
/// offsets in its own messages then count the file without its carriage returns; a CR inside a
/// quoted field is read as LF too, which no field of these files holds.)
pub fn csv_reader<R: Read>(input: R) -> csv::Reader<LineEndsAsLf<R>> {
    csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(LineEndsAsLf::new(input))
}

/// `input` with each `\r\n`, and each other `\r`, read as `\n`.
pub struct LineEndsAsLf<R> {
    inner: std::io::BufReader<R>,
    /// A `\r` that ended the last buffer, held until the next byte shows whether `\n` follows.
    held_cr: bool,
    /// Bytes since the last line ending, refused past [`MAX_LINE_BYTES`].
    line: usize,
    /// Bytes read in all, refused past [`MAX_INPUT_BYTES`].
    total: u64,
}

/// The largest offline input: far above any campaign (2.7 million rows are about 60 MB), and
/// what keeps an endless stream of valid rows (`yes needle,64,1000`) from being read until memory
/// runs out.
pub const MAX_INPUT_BYTES: u64 = 1 << 30;

/// The longest line an offline input may have: far above any real row, and what keeps an input
/// with no line ending (`/dev/zero`) from being read as one record until memory runs out.
pub const MAX_LINE_BYTES: usize = 1 << 20;

impl<R: Read> LineEndsAsLf<R> {
    pub fn new(input: R) -> Self {
        LineEndsAsLf {
            inner: std::io::BufReader::new(input),
            held_cr: false,
            line: 0,
            total: 0,
        }
    }
}

impl<R: Read> Read for LineEndsAsLf<R> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        use std::io::BufRead;
        if out.is_empty() {
            return Ok(0);
        }
        // Loops only when a buffer held nothing but a `\r` to hold back: 0 would mean the end.
        loop {
            let buf = self.inner.fill_buf()?;
            let mut n = 0;
            if std::mem::take(&mut self.held_cr) && buf.first() != Some(&b'\n') {
                out[0] = b'\n';
                n = 1;
                self.line = 0;
            }
            let mut used = 0;
            while used < buf.len() && n < out.len() {
                let mut b = buf[used];
                used += 1;
                if b == b'\r' {
                    match buf.get(used) {
                        Some(b'\n') => continue,
                        None => {
                            self.held_cr = true;
                            break;
                        }
                        Some(_) => b = b'\n',
                    }
                }
                out[n] = b;
                n += 1;
                self.line = if b == b'\n' { 0 } else { self.line + 1 };
                self.total += 1;
                if self.total > MAX_INPUT_BYTES {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("longer than {MAX_INPUT_BYTES} bytes (an endless stream?); accepted: an input of at most {MAX_INPUT_BYTES} bytes"),
                    ));
                }
                if self.line > MAX_LINE_BYTES {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a line longer than {MAX_LINE_BYTES} bytes (not a CSV file?); accepted: CSV rows of at most {MAX_LINE_BYTES} bytes"),
                    ));
                }
            }
            self.inner.consume(used);
            if n > 0 || !self.held_cr {
                return Ok(n);
            }
        }
    }
}

/// Read a samples CSV.
pub fn read_samples(input: impl Read) -> Result<SampleSet, CsvError> {
    let mut reader = csv_reader(input);
    let cols = columns(
        &mut reader,
        SAMPLES,
        &["kernel", "sms", "time_ns"],
        "kernel,sms,time_ns",
    )?;
    let mut set = SampleSet::new();
    for record in reader.records() {
        let record = record.map_err(|e| malformed(SAMPLES, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        let kernel = text(&record, cols[0], SAMPLES, line, "kernel")?;
        // As the daemon and manifests name kernels: a newline in a name forged lines of fit's
        // messages (a black-box hunt found it), and the daemon refused the import anyway.
        if !crate::manifest::valid_name(&kernel) {
            let accepted = "1 to 64 of A-Z a-z 0-9 _ . - (as kernels are named everywhere)";
            return Err(bad(SAMPLES, line, "kernel", &kernel, accepted));
        }
        let sms: u32 = number(
            &record,
            cols[1],
            SAMPLES,
            line,
            "sms",
            "a whole number of SMs, at least 1",
        )?;
        if sms == 0 {
            return Err(bad(
                SAMPLES,
                line,
                "sms",
                "0",
                "a whole number of SMs, at least 1",
            ));
        }
        let accepted = "a whole number of nanoseconds, from 1 to 3600000000000 (one hour)";
        let time_ns: u64 = number(&record, cols[2], SAMPLES, line, "time_ns", accepted)?;
        if time_ns == 0 || time_ns > MAX_TIME_NS {
            // No launch takes no time, nor an hour: a unit or rounding mistake upstream,
            // refused here rather than by the daemon after the file was read.
            let value = time_ns.to_string();
            return Err(bad(SAMPLES, line, "time_ns", &value, accepted));
        }
        set.entry(kernel)
            .or_default()
            .entry(sms)
            .or_default()
            .push(time_ns);
    }
    if set.is_empty() {
        return Err(CsvError::Empty { what: SAMPLES });
    }
    Ok(set)
}

/// Read a geometry CSV.
pub fn read_geometry(input: impl Read) -> Result<BTreeMap<String, Geometry>, CsvError> {
    let mut reader = csv_reader(input);
    let expected = "kernel,blocks,blocks_per_sm";
    let cols = columns(
        &mut reader,
        GEOMETRY,
        &["kernel", "blocks", "blocks_per_sm"],
        expected,
    )?;
    let mut out = BTreeMap::new();
    let mut lines: BTreeMap<String, u64> = BTreeMap::new();
    for record in reader.records() {
        let record = record.map_err(|e| malformed(GEOMETRY, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        let kernel = text(&record, cols[0], GEOMETRY, line, "kernel")?;
        let positive = "a whole number, at least 1";
        let blocks: u32 = number(&record, cols[1], GEOMETRY, line, "blocks", positive)?;
        let blocks_per_sm: u32 =
            number(&record, cols[2], GEOMETRY, line, "blocks_per_sm", positive)?;
        if blocks == 0 {
            return Err(bad(GEOMETRY, line, "blocks", "0", positive));
        }
        if blocks_per_sm == 0 {
            return Err(bad(GEOMETRY, line, "blocks_per_sm", "0", positive));
        }
        // A second row for a kernel would silently replace the first: which is meant?
        if let Some(first) = lines.insert(kernel.clone(), line) {
            return Err(CsvError::Malformed {
                what: GEOMETRY,
                line,
                detail: format!(
                    "kernel `{kernel}` again (first on line {first}); accepted: one row per kernel"
                ),
            });
        }
        out.insert(
            kernel,
            Geometry {
                blocks,
                blocks_per_sm,
            },
        );
    }
    Ok(out)
}

/// Write samples in the design's format.
pub fn write_samples(out: impl Write, set: &SampleSet) -> std::io::Result<()> {
    let mut w = SamplesWriter::new(out)?;
    for (kernel, sizes) in set {
        for (sms, times) in sizes {
            w.write(kernel, *sms, times)?;
        }
    }
    w.finish()
}

/// A samples CSV written as the samples come (the header first), for runs too large to hold.
pub struct SamplesWriter<W: Write> {
    csv: csv::Writer<W>,
}

impl<W: Write> SamplesWriter<W> {
    pub fn new(out: W) -> std::io::Result<Self> {
        let mut csv = csv::Writer::from_writer(out);
        csv.write_record(["kernel", "sms", "time_ns"])?;
        Ok(SamplesWriter { csv })
    }

    pub fn write(&mut self, kernel: &str, sms: u32, times: &[u64]) -> std::io::Result<()> {
        let sms = sms.to_string();
        for t in times {
            self.csv.write_record([kernel, &sms, &t.to_string()])?;
        }
        Ok(())
    }

    pub fn finish(mut self) -> std::io::Result<()> {
        self.csv.flush()
    }
}

fn columns<R: Read>(
    reader: &mut csv::Reader<R>,
    what: &'static str,
    names: &[&'static str; 3],
    expected: &'static str,
) -> Result<[usize; 3], CsvError> {
    let headers = reader.headers().map_err(|e| malformed(what, &e))?.clone();
    let mut cols = [0; 3];
    for (slot, &name) in cols.iter_mut().zip(names) {
        *slot = column(&headers, what, name, expected)?;
    }
    Ok(cols)
}

/// Where `headers` name `name`, once: a column named twice is refused, not read from the first
/// (a black-box hunt's `kernel,sms,time_ns,time_ns` was fitted from the first without a word).
fn column(
    headers: &csv::StringRecord,
    what: &'static str,
    name: &'static str,
    expected: &'static str,
) -> Result<usize, CsvError> {
    let mut at = headers.iter().enumerate().filter(|(_, h)| *h == name);
    let (first, _) = at.next().ok_or(CsvError::MissingColumn {
        what,
        column: name,
        expected,
    })?;
    if at.next().is_some() {
        return Err(CsvError::Malformed {
            what,
            line: 1,
            detail: format!(
                "the header names `{name}` more than once; accepted: each column once ({expected})"
            ),
        });
    }
    Ok(first)
}

const DELAYS: &str = "delay-probe CSV";

/// A delay-probe file: launch times in launch order, from its `time_ns` column (other columns
/// are ignored). Read as the first column whatever it was, a `launch,time_ns` file gave the
/// launch numbers, and its delays were lost without a word (a black-box hunt found it); an
/// empty one was taken as no probe.
pub fn read_times(input: impl Read) -> Result<Vec<u64>, CsvError> {
    let mut reader = csv_reader(input);
    let headers = reader.headers().map_err(|e| malformed(DELAYS, &e))?.clone();
    let col = column(&headers, DELAYS, "time_ns", "time_ns")?;
    let accepted = "a whole number of nanoseconds, from 1 to 3600000000000 (one hour)";
    let mut times = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| malformed(DELAYS, &e))?;
        let line = record.position().map_or(0, |p| p.line());
        let t: u64 = number(&record, col, DELAYS, line, "time_ns", accepted)?;
        if t == 0 || t > MAX_TIME_NS {
            return Err(bad(DELAYS, line, "time_ns", &t.to_string(), accepted));
        }
        times.push(t);
    }
    if times.is_empty() {
        return Err(CsvError::Empty { what: DELAYS });
    }
    Ok(times)
}

fn text(
    r: &csv::StringRecord,
    col: usize,
    what: &'static str,
    line: u64,
    field: &'static str,
) -> Result<String, CsvError> {
    match r.get(col) {
        Some(v) if !v.is_empty() => Ok(v.to_string()),
        _ => Err(bad(what, line, field, "", "a non-empty name")),
    }
}

fn number<T: std::str::FromStr>(
    r: &csv::StringRecord,
    col: usize,
    what: &'static str,
    line: u64,
    field: &'static str,
    accepted: &'static str,
) -> Result<T, CsvError> {
    let value = r.get(col).unwrap_or("");
    value
        .parse()
        .map_err(|_| bad(what, line, field, value, accepted))
}

fn bad(
    what: &'static str,
    line: u64,
    field: &'static str,
    value: &str,
    accepted: &'static str,
) -> CsvError {
    CsvError::BadValue {
        what,
        line,
        field,
        value: value.to_string(),
        accepted,
    }
}

fn malformed(what: &'static str, e: &csv::Error) -> CsvError {
    let line = e.position().map_or(0, |p| p.line());
    let detail = match e.kind() {
        // The csv crate's own words repeat the line and say "record" for a row.
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => format!(
            "{len} fields where the header has {expected_len}; accepted: every row with as many fields as the header (a field with a comma is quoted)"
        ),
        _ => e.to_string(),
    };
    CsvError::Malformed { what, line, detail }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A column named twice and a kernel named as nothing else is named are refused, and a
    /// delay-probe file is read by its `time_ns` column, not its first (black-box hunt
    /// findings: each was read without a word).
    #[test]
    fn columns_are_read_by_name_once_and_names_as_everywhere() {
        let twice = read_samples("kernel,sms,time_ns,time_ns\nk,8,1,2\n".as_bytes());
        assert!(twice
            .unwrap_err()
            .to_string()
            .contains("names `time_ns` more than once"),);
        let forged = read_samples("kernel,sms,time_ns\n\"k\nwcetctl: forged\",8,1\n".as_bytes());
        let why = forged.unwrap_err().to_string();
        assert!(
            why.contains("`kernel`") && why.contains("accepted: 1 to 64"),
            "{why}"
        );
        let times = read_times("launch,time_ns\n1,26048\n2,26050\n3,9000000\n".as_bytes());
        assert_eq!(times.unwrap(), [26048, 26050, 9000000]);
        for (bad, said) in [
            ("launch,ns\n1,26048\n", "missing column `time_ns`"),
            ("time_ns\n", "no rows after the header"),
            ("time_ns\n0\n", "`time_ns` is `0`"),
        ] {
            let why = read_times(bad.as_bytes()).unwrap_err().to_string();
            assert!(why.contains(said), "{bad}: {why}");
        }
    }

    /// A geometry error names the field that is wrong, and a kernel listed twice is refused
    /// (a zero per SM was named `blocks`, and a second row silently replaced the first).
    #[test]
    fn geometry_errors_name_the_field_and_a_kernel_listed_twice() {
        let cases = [
            (
                "kernel,blocks,blocks_per_sm\nneedle,256,0\n",
                "line 2: `blocks_per_sm` is `0`",
            ),
            (
                "kernel,blocks,blocks_per_sm\nneedle,256,16\nbfs,8,1\nneedle,512,8\n",
                "line 4: kernel `needle` again (first on line 2)",
            ),
        ];
        for (input, expected) in cases {
            let err = read_geometry(input.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{input:?}: {err}");
        }
    }

    #[test]
    fn reads_rows_in_order_and_ignores_extra_columns() {
        let csv = "run,kernel,sms,time_ns,note\n1,bfs,8,100,x\n1,bfs,8,90,y\n2,bfs,16,50,z\n";
        let set = read_samples(csv.as_bytes()).unwrap();
        assert_eq!(set["bfs"][&8], vec![100, 90]);
        assert_eq!(set["bfs"][&16], vec![50]);
    }

    #[test]
    fn bad_files_say_what_was_wrong_and_what_is_accepted() {
        let cases = [
            ("kernel,sms\nbfs,8\n", "missing column `time_ns`"),
            (
                "kernel,sms,time_ns\nbfs,8,-5\n",
                "line 2: `time_ns` is `-5`",
            ),
            (
                "kernel,sms,time_ns\nbfs,8,fast\n",
                "accepted: a whole number of nanoseconds, from 1 to 3600000000000 (one hour)",
            ),
            ("kernel,sms,time_ns\nbfs,8,0\n", "`time_ns` is `0`"),
            // Saturated every bound at u64::MAX, with no note.
            (
                "kernel,sms,time_ns\nbfs,8,18446744073709551615\n",
                "`time_ns` is `18446744073709551615`; accepted: a whole number of nanoseconds, from 1",
            ),
            ("kernel,sms,time_ns\nbfs,0,5\n", "`sms` is `0`"),
            ("kernel,sms,time_ns\n,8,5\n", "`kernel` is ``"),
            ("kernel,sms,time_ns\nbfs,8\n", "line 2"),
            ("kernel,sms,time_ns\n", "no rows"),
        ];
        for (input, expected) in cases {
            let err = read_samples(input.as_bytes()).unwrap_err().to_string();
            assert!(err.contains(expected), "{input:?}: {err}");
        }
    }

    /// The same bad value is named on the same line with CRLF or CR as with LF (CRLF once said
    /// one line less, CR always line 1), and a malformed row too.
    #[test]
    fn crlf_files_name_the_lines_lf_files_do() {
        let cases = [
            (
                "kernel,sms,time_ns\nbfs,8,5\nbfs,8,6\nbfs,8,7\nbfs,8,x\n",
                "line 5: `time_ns` is `x`",
            ),
            (
                "kernel,sms,time_ns\nbfs,8,5\nbfs,8\n",
                "line 3: 2 fields where the header has 3",
            ),
        ];
        for (lf, expected) in cases {
            let crlf = lf.replace('\n', "\r\n");
            let cr = lf.replace('\n', "\r");
            for input in [lf, crlf.as_str(), cr.as_str()] {
                let err = read_samples(input.as_bytes()).unwrap_err().to_string();
                assert!(err.contains(expected), "{input:?}: {err}");
            }
        }
    }

    /// `\r\n` and a lone `\r` each become one `\n`, wherever the reads split them.
    #[test]
    fn crlf_is_read_as_lf_across_any_split() {
        /// Hands out one byte per read, so every `\r` ends a buffer.
        struct Trickle<'a>(&'a [u8]);
        impl Read for Trickle<'_> {
            fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
                let Some((&b, rest)) = self.0.split_first() else {
                    return Ok(0);
                };
                out[0] = b;
                self.0 = rest;
                Ok(1)
            }
        }
        let input = b"a\r\nb\rc\r\r\n\r";
        let want = b"a\nb\nc\n\n\n".to_vec();
        let mut got = Vec::new();
        LineEndsAsLf::new(Trickle(input))
            .read_to_end(&mut got)
            .unwrap();
        assert_eq!(got, want);
        let mut got = Vec::new();
        LineEndsAsLf::new(&input[..]).read_to_end(&mut got).unwrap();
        assert_eq!(got, want);
        // Read one byte at a time too, so that output fills mid-buffer.
        let mut r = LineEndsAsLf::new(&input[..]);
        let mut got = Vec::new();
        let mut one = [0u8];
        while r.read(&mut one).unwrap() == 1 {
            got.push(one[0]);
        }
        assert_eq!(got, want);
    }

    #[test]
    fn written_samples_read_back_the_same() {
        let mut set = SampleSet::new();
        set.entry("lud".into())
            .or_default()
            .insert(8, vec![3, 1, 2]);
        let mut buf = Vec::new();
        write_samples(&mut buf, &set).unwrap();
        assert_eq!(read_samples(buf.as_slice()).unwrap(), set);
    }

    #[test]
    fn geometry_is_read_and_zero_refused() {
        let g = read_geometry("kernel,blocks,blocks_per_sm\nlud,256,2\n".as_bytes()).unwrap();
        assert_eq!(
            g["lud"],
            Geometry {
                blocks: 256,
                blocks_per_sm: 2
            }
        );
        assert!(read_geometry("kernel,blocks,blocks_per_sm\nlud,0,2\n".as_bytes()).is_err());
    }
}
