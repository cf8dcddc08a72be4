//! The daemon's configuration file (`/etc/wcetd/wcetd.toml`): the same keys as `wcetd`'s long
//! flags, so that operators set options without editing unit drop-ins. Flags given on the command
//! line win over the file. The file is turned into the flags it stands for and parsed by the same
//! clap definition, so a key is accepted, typed and documented exactly as its flag is.

use anyhow::{anyhow, bail, Context};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// Where the daemon looks for its configuration when `--config` is not given.
pub const DEFAULT_PATH: &str = "/etc/wcetd/wcetd.toml";

/// Flags a file may not set: the file's own path and one-shot actions.
const NOT_IN_FILE: [&str; 4] = ["config", "help", "version", "generate"];

/// The largest configuration file read: far above any real one, so that a file that is not one
/// (a log pointed at by mistake) is refused instead of parsed.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// The configuration file to read: `explicit` (which must exist), else [`DEFAULT_PATH`] when it
/// exists, else none. A path that exists but is not a regular file (a directory, a FIFO) is an
/// error in both cases, named as such: skipping the default path then would run the daemon with
/// none of the operator's settings, and "no such file" would send them looking for the wrong fault.
pub fn locate(explicit: Option<&Path>) -> anyhow::Result<Option<PathBuf>> {
    const ACCEPTED: &str = "accepted: a TOML file with the same keys as the flags";
    let (path, named) = match explicit {
        Some(p) => (p.to_path_buf(), format!("--config {}", p.display())),
        None => (
            PathBuf::from(DEFAULT_PATH),
            format!("configuration {DEFAULT_PATH}"),
        ),
    };
    match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => Ok(Some(path)),
        Ok(m) if m.is_dir() => bail!("{named}: is a directory; {ACCEPTED}"),
        Ok(_) => bail!("{named}: not a regular file (a FIFO, socket or device); {ACCEPTED}"),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && explicit.is_none() => Ok(None),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            bail!("{named}: no such file; {ACCEPTED} (see {DEFAULT_PATH})")
        }
        Err(e) => bail!("{named}: cannot be read: {e}; {ACCEPTED}"),
    }
}

/// The command line with the file's settings put before the flags given, leaving out every key
/// whose flag was given (flags win). `given` is the long name of every flag on the command line.
pub fn merge(
    cmd: &clap::Command,
    args: &[OsString],
    given: &[String],
    file: &Path,
) -> anyhow::Result<Vec<OsString>> {
    let bytes = crate::manifest::read_regular(file, MAX_CONFIG_BYTES + 1)
        .with_context(|| format!("reading configuration {}", file.display()))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        bail!(
            "configuration {}: larger than {MAX_CONFIG_BYTES} bytes; accepted: a TOML file with the same keys as the flags",
            file.display()
        );
    }
    let text = String::from_utf8(bytes)
        .with_context(|| format!("configuration {}: not UTF-8 text", file.display()))?;
    let table: toml::Table = toml::from_str(&text)
        .with_context(|| format!("configuration {}: not valid TOML", file.display()))?;
    let mut merged: Vec<OsString> = args.iter().take(1).cloned().collect();
    for (key, value) in &table {
        let arg = cmd
            .get_arguments()
            .find(|a| a.get_long() == Some(key.as_str()) && !NOT_IN_FILE.contains(&key.as_str()))
            .ok_or_else(|| {
                anyhow!(
                    "configuration {}: key `{key}` is unknown; accepted: {}, and for tests: {}",
                    file.display(),
                    accepted_keys(cmd).join(", "),
                    test_keys(cmd).join(", ")
                )
            })?;
        let tokens = flag_tokens(arg, key, value)
            .map_err(|e| anyhow!("configuration {}: key `{key}`: {e}", file.display()))?;
        // Flags win: a key whose flag is given, or that conflicts with one given (`contended` in
        // the file and `--interference` on the command line), is left out, but checked all the
        // same: a file that is wrong must not wait for the day its flag is dropped (under the
        // unit's `--system`, `system = "yes"` was never read).
        if given.iter().any(|g| g == key || conflicting(cmd, arg, g)) {
            let alone = args.iter().take(1).cloned().chain(tokens);
            if let Err(e) = cmd.clone().try_get_matches_from(alone) {
                let first = e.to_string();
                let first = first
                    .lines()
                    .next()
                    .unwrap_or_default()
                    .trim_start_matches("error: ");
                bail!(
                    "configuration {}: key `{key}` (overridden on the command line): {first}",
                    file.display()
                );
            }
            continue;
        }
        merged.extend(tokens);
    }
    merged.extend(args.iter().skip(1).cloned());
    Ok(merged)
}

/// Whether `arg` and the flag `--long` may not be given together (declared on either side).
fn conflicting(cmd: &clap::Command, arg: &clap::Arg, long: &str) -> bool {
    let Some(other) = cmd.get_arguments().find(|a| a.get_long() == Some(long)) else {
        return false;
    };
    cmd.get_arg_conflicts_with(arg)
        .iter()
        .any(|c| c.get_id() == other.get_id())
        || cmd
            .get_arg_conflicts_with(other)
            .iter()
            .any(|c| c.get_id() == arg.get_id())
}

/// Keys a file accepts: every long flag but the one-shot ones.
pub fn accepted_keys(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| !a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| !NOT_IN_FILE.contains(l))
        .map(str::to_string)
        .collect()
}

/// Keys a file accepts that `--help` does not show: the simulator's fault injection, for tests
/// (accepted all the same, so the error lists them too).
fn test_keys(cmd: &clap::Command) -> Vec<String> {
    cmd.get_arguments()
        .filter(|a| a.is_hide_set())
        .filter_map(|a| a.get_long())
        .filter(|l| !NOT_IN_FILE.contains(l))
        .map(str::to_string)
        .collect()
}

/// `key = value` as command-line tokens: a switch for `true`, nothing for `false`, one value per
/// array element. A value is joined to its flag (`--key=value`): apart, a value that starts with
/// `-` (`calibration-budget = -1`) read as a flag of its own, and clap's error named neither.
fn flag_tokens(arg: &clap::Arg, key: &str, value: &toml::Value) -> Result<Vec<OsString>, String> {
    let flag = OsString::from(format!("--{key}"));
    let with = |v: &str| OsString::from(format!("--{key}={v}"));
    if !arg.get_action().takes_values() {
        return match value {
            toml::Value::Boolean(true) => Ok(vec![flag]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            other => Err(format!(
                "is a switch; accepted: true or false, got {}",
                other.type_str()
            )),
        };
    }
    let scalar = |v: &toml::Value| match v {
        toml::Value::String(s) => Ok(s.clone()),
        toml::Value::Integer(i) => Ok(i.to_string()),
        toml::Value::Float(f) => Ok(f.to_string()),
        toml::Value::Boolean(b) => Ok(b.to_string()),
        other => Err(format!(
            "accepted: a string, number or boolean, got {}",
            other.type_str()
        )),
    };
    match value {
        // A comma-separated option takes the list at once; a repeatable one once per element.
        toml::Value::Array(items) => {
            let values = items.iter().map(scalar).collect::<Result<Vec<_>, _>>()?;
            if arg.get_value_delimiter().is_some() {
                return Ok(vec![with(&values.join(","))]);
            }
            Ok(values.iter().map(|v| with(v)).collect())
        }
        v => Ok(vec![with(&scalar(v)?)]),
    }
}

/// Long names of the flags on a command line (`--name` and `--name=value`), for [`merge`].
pub fn given_flags(args: &[OsString]) -> Vec<String> {
    args.iter()
        .skip(1)
        .filter_map(|a| a.to_str())
        .take_while(|a| *a != "--")
        .filter_map(|a| a.strip_prefix("--"))
        .map(|a| a.split('=').next().unwrap_or(a).to_string())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::{CommandFactory, Parser};

    #[derive(Parser, Debug)]
    struct Flags {
        /// Launches.
        #[arg(long, default_value_t = 200)]
        launches: u32,
        /// Tags.
        #[arg(long, value_delimiter = ',', default_value = "isolated")]
        interference: Vec<String>,
        /// A switch.
        #[arg(long)]
        session: bool,
        /// Conflicts with `session`, declared on this side only.
        #[arg(long, conflicts_with = "session")]
        system: bool,
        /// File.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Repeatable.
        #[arg(long)]
        dir: Vec<PathBuf>,
    }

    fn parse(file: &str, cli: &[&str]) -> anyhow::Result<Flags> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wcetd.toml");
        std::fs::write(&path, file).unwrap();
        let args: Vec<OsString> = std::iter::once("wcetd")
            .chain(cli.iter().copied())
            .map(OsString::from)
            .collect();
        let merged = merge(&Flags::command(), &args, &given_flags(&args), &path)?;
        Ok(Flags::try_parse_from(merged)?)
    }

    #[test]
    fn the_file_sets_what_the_flags_leave_and_flags_win() {
        let f = parse(
            "launches = 500\ninterference = [\"isolated\", \"contended\"]\nsession = true\n",
            &[],
        )
        .unwrap();
        assert_eq!(f.launches, 500);
        assert_eq!(f.interference, ["isolated", "contended"]);
        assert!(f.session);
        let f = parse("dir = [\"/a\", \"/b,c\"]\n", &[]).unwrap();
        assert_eq!(f.dir, [PathBuf::from("/a"), PathBuf::from("/b,c")]);
        let f = parse("launches = 500\n", &["--launches=7"]).unwrap();
        assert_eq!(f.launches, 7);
        let f = parse("launches = 500\n", &["--launches", "8"]).unwrap();
        assert_eq!(f.launches, 8);
        assert!(!parse("session = false\n", &[]).unwrap().session);
        // A key that conflicts with a flag given is left out, whichever side declares it.
        let f = parse("system = true\n", &["--session"]).unwrap();
        assert!(f.session && !f.system);
        let f = parse("session = true\n", &["--system"]).unwrap();
        assert!(f.system && !f.session);
    }

    #[test]
    fn a_config_path_that_is_not_a_file_says_what_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let e = locate(Some(dir.path())).unwrap_err().to_string();
        assert!(
            e.contains("is a directory") && e.contains("accepted"),
            "{e}"
        );
        let missing = dir.path().join("absent.toml");
        let e = locate(Some(&missing)).unwrap_err().to_string();
        assert!(e.contains("no such file"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path in a directory this test owns.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = locate(Some(&fifo)).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        let file = dir.path().join("wcetd.toml");
        std::fs::write(&file, "launches = 5\n").unwrap();
        assert_eq!(locate(Some(&file)).unwrap(), Some(file.clone()));
        // A file that is not text, or far too large to be a configuration, is refused whole.
        std::fs::write(&file, [0xff, 0xfe, 0x00]).unwrap();
        let e = format!(
            "{:#}",
            merge(&Flags::command(), &[], &[], &file).unwrap_err()
        );
        assert!(e.contains("not UTF-8"), "{e}");
        std::fs::write(&file, vec![b'#'; (MAX_CONFIG_BYTES + 1) as usize]).unwrap();
        let e = format!(
            "{:#}",
            merge(&Flags::command(), &[], &[], &file).unwrap_err()
        );
        assert!(e.contains("larger than"), "{e}");
    }

    #[test]
    fn bad_keys_and_values_say_what_is_accepted() {
        let e = parse("lanches = 5\n", &[]).unwrap_err().to_string();
        assert!(e.contains("`lanches`") && e.contains("launches"), "{e}");
        let e = parse("session = 3\n", &[]).unwrap_err().to_string();
        assert!(
            e.contains("`session`") && e.contains("true or false"),
            "{e}"
        );
        let e = parse("config = \"x\"\n", &[]).unwrap_err().to_string();
        assert!(e.contains("unknown"), "{e}");
        let e = format!("{:#}", parse("launches = \"many\"\n", &[]).unwrap_err());
        assert!(e.contains("'many'") && e.contains("--launches"), "{e}");
        // A negative value is a value, not a flag: the error names the key (it said
        // "unexpected argument '-1' found").
        let e = format!("{:#}", parse("launches = -1\n", &[]).unwrap_err());
        assert!(e.contains("'-1'") && e.contains("--launches"), "{e}");
        assert!(locate(Some(Path::new("/nonexistent/wcetd.toml"))).is_err());
        // A key its flag overrides is checked all the same (it was never read, so never
        // refused, until the day the flag went).
        let e = parse("session = \"yes\"\n", &["--session"])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`session`") && e.contains("true or false"),
            "{e}"
        );
        let e = format!(
            "{:#}",
            parse("launches = \"many\"\n", &["--launches=7"]).unwrap_err()
        );
        assert!(
            e.contains("`launches` (overridden on the command line)") && e.contains("'many'"),
            "{e}"
        );
        let e = format!("{:#}", parse("system = 3\n", &["--session"]).unwrap_err());
        assert!(e.contains("`system`"), "{e}");
    }
}
