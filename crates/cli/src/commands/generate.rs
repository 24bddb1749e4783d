//! `mailvault generate man DIR` and `mailvault generate completions DIR`: the man pages
//! (one for `mailvault`, one per command, as `mailvault-backup.1`) and the bash, zsh and
//! fish completions, made from the CLI's own definition so they never disagree with it.
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

/// `mailvault.1` and `mailvault-<command>.1` for every command that is not hidden.
fn man_pages(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut cmd = Cli::command();
    // Built, so that each command's page lists the options every command takes.
    cmd.build();
    let mut out = vec![write_man(dir, "mailvault", cmd.clone())?];
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        let name = format!("mailvault-{}", sub.get_name());
        let sub = sub.clone().name(name.clone()).display_name(name.clone());
        out.push(write_man(dir, &name, sub)?);
    }
    Ok(out)
}

fn write_man(dir: &Path, name: &str, cmd: clap::Command) -> Result<PathBuf> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd).render(&mut page)?;
    let path = dir.join(format!("{name}.1"));
    std::fs::write(&path, page).with_context(|| format!("writing {}", path.display()))?;
    Ok(path)
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
