//! `mailvault generate man DIR` and `mailvault generate completions DIR`: the man pages
//! (one for `mailvault`, one per command and subcommand, as `mailvault-backup.1` and
//! `mailvault-repair-index.1`) and the bash, zsh and fish completions, made from the CLI's
//! own definition so they never disagree with it.
//! Hidden: packagers run it (scripts/deb.sh).

use crate::{Cli, Outcome};
use anyhow::{Context, Result};
use clap::CommandFactory;
use std::path::{Path, PathBuf};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// What to write.
    #[arg(value_parser = ["man", "completions"])]
    pub what: String,
    /// The directory to write into (made if missing).
    pub dir: PathBuf,
}

pub fn run(a: Args) -> Result<Outcome> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let written = match a.what.as_str() {
        "man" => man_pages(&a.dir)?,
        _ => completions(&a.dir)?,
    };
    for p in written {
        println!("{}", crate::output::safe(&p.display().to_string()));
    }
    Ok(Outcome::Ok)
}

/// `mailvault.1` and `mailvault-<command>.1` for every command that is not hidden, and
/// `mailvault-<command>-<subcommand>.1` for theirs (`mailvault-repair-index.1`); no page
/// for clap's `help`.
fn man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut cmd = Cli::command().disable_help_subcommand(true);
    // Built, so that each command's page lists the options every command takes and is
    // named by its path (`mailvault-repair-index`).
    cmd.build();
    let mut out = Vec::new();
    write_man(dir, &cmd, &mut out)?;
    Ok(out)
}

fn write_man(dir: &Path, cmd: &clap::Command, out: &mut Vec<PathBuf>) -> Result<()> {
    let page = clap_mangen::Man::new(cmd.clone());
    let path = dir.join(page.get_filename());
    page.generate_to(dir)
        .with_context(|| format!("writing {}", path.display()))?;
    out.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        write_man(dir, sub, out)?;
    }
    Ok(())
}

/// The completions of bash (`mailvault.bash`), zsh (`_mailvault`) and fish
/// (`mailvault.fish`).
fn completions(dir: &Path) -> Result<Vec<PathBuf>> {
    use clap_complete::Shell;
    let mut out = Vec::new();
    for shell in [Shell::Bash, Shell::Zsh, Shell::Fish] {
        let path = clap_complete::generate_to(shell, &mut Cli::command(), "mailvault", dir)
            .with_context(|| format!("writing the {shell} completion into {}", dir.display()))?;
        out.push(path);
    }
    Ok(out)
}
