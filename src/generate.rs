//! Man pages and shell completions generated from a binary's clap definition, so that they can
//! never disagree with `--help`. `systemd/install.sh` runs each binary's hidden `generate` to
//! write them: `DIR/man/<name>.<section>` (one page per subcommand too) and
//! `DIR/completions/{<name>.bash, _<name>, <name>.fish}`.

use anyhow::Context;
use clap_complete::Shell;
use std::path::Path;

/// Write the man pages (in `section`) and bash, zsh and fish completions of `cmd` under `dir`.
pub fn write_all(cmd: clap::Command, section: &'static str, dir: &Path) -> anyhow::Result<()> {
    let name = cmd.get_name().to_string();
    let man = dir.join("man");
    std::fs::create_dir_all(&man).with_context(|| format!("creating {}", man.display()))?;
    let mut cmd = cmd.disable_help_subcommand(true);
    cmd.build();
    man_pages(&cmd, section, &man)
        .with_context(|| format!("writing man pages into {}", man.display()))?;
    let completions = dir.join("completions");
    std::fs::create_dir_all(&completions)
        .with_context(|| format!("creating {}", completions.display()))?;
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        clap_complete::generate_to(shell, &mut cmd.clone(), &name, &completions).with_context(
            || format!("writing {shell} completions into {}", completions.display()),
        )?;
    }
    Ok(())
}

/// A page for `cmd` and one for each visible subcommand (`wcetctl-bound.1`, ...).
fn man_pages(cmd: &clap::Command, section: &str, dir: &Path) -> std::io::Result<()> {
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        man_pages(sub, section, dir)?;
    }
    clap_mangen::Man::new(cmd.clone())
        .section(section)
        .manual("wcetd")
        .generate_to(dir)?;
    Ok(())
}

/// The completion script of `cmd` for `shell`, on standard output.
pub fn print_completions(mut cmd: clap::Command, shell: Shell) {
    let name = cmd.get_name().to_string();
    clap_complete::generate(shell, &mut cmd, name, &mut std::io::stdout());
}
