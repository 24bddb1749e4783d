//! `mailvault restore`

use crate::output::{bytes, count, print_failures, safe};
use crate::{progress::Bar, repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::dest::imap::{ImapRestoreOptions, ImapRestoreReport};
use mailvault_core::dest::owners::RestoreOwners;
use mailvault_core::ops::restore::imap as imap_restore;
use mailvault_core::ops::restore::{restore, RestoreOptions};
use mailvault_core::restore::{Part, Request, RestoreReport, Selection};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Snapshot id (a unique prefix is enough) or `latest`.
    pub snapshot: String,
    /// Only this account (repeatable).
    #[arg(long)]
    pub account: Vec<String>,
    /// Only this folder and its subfolders, e.g. `Sent` or `Archive/2023` (repeatable).
    #[arg(long)]
    pub folder: Vec<String>,
    /// Only this message, by Maildir key as `ls` shows it or by the id `search` prints
    /// (repeatable).
    #[arg(long)]
    pub message: Vec<String>,
    /// Which part of each account: `mail` (its folders), `home` (its home beside the
    /// Maildir: sieve filters and the active one's link, put back without touching its
    /// mail), `acls` (its folders' access control lists alone: who may see which
    /// folder), or `all`.
    #[arg(long, value_enum, default_value_t = PartArg::All, conflicts_with_all = ["folder", "message"])]
    pub part: PartArg,
    /// Restore account OLD as NEW (`bob@old.example=bob@new.example`, repeatable): a
    /// migration. `--account` still names OLD; in a store NEW gets its own place, and
    /// every ACL entry naming OLD names NEW.
    #[arg(long, value_name = "OLD=NEW")]
    pub map_user: Vec<String>,
    /// `--map-user` for every line of FILE: `OLD NEW` or `OLD=NEW`; `#` starts a comment.
    #[arg(long, value_name = "FILE")]
    pub map_users: Option<std::path::PathBuf>,
    /// Print the plan (accounts, folders, messages, bytes, the pack spans to read, in
    /// order) and write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub to: TargetArgs,
}

/// `--part`.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PartArg {
    All,
    Mail,
    Home,
    Acls,
}

impl From<PartArg> for Part {
    fn from(p: PartArg) -> Part {
        match p {
            PartArg::All => Part::All,
            PartArg::Mail => Part::Mail,
            PartArg::Home => Part::Home,
            PartArg::Acls => Part::Acls,
        }
    }
}

impl Args {
    /// The snapshot and what `--account`, `--folder` and `--message` select of it.
    fn selection(&self) -> Result<Selection> {
        Ok(Selection {
            map_users: self.user_map()?,
            snapshot: self.snapshot.clone(),
            accounts: self.account.clone(),
            folders: self.folder.clone(),
            messages: self.message.clone(),
            part: self.part.into(),
            ..Selection::default()
        })
    }

    /// `--map-user` and the lines of `--map-users`: each OLD once, no two onto one NEW.
    fn user_map(&self) -> Result<Vec<(String, String)>> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        let mut add = |spec: &str, at: &str| -> Result<()> {
            let (old, new) = match spec.split_once('=') {
                Some(p) => p,
                None => spec.split_once(char::is_whitespace).unwrap_or((spec, "")),
            };
            let (old, new) = (old.trim(), new.trim());
            if old.is_empty() || new.is_empty() || new.contains(char::is_whitespace) {
                anyhow::bail!(
                    "{at}: expected OLD=NEW (two account names), not {:?}",
                    safe(spec)
                );
            }
            if let Some((o, n)) = pairs.iter().find(|(o, n)| o == old || n == new) {
                anyhow::bail!(
                    "{at}: {}={} and {}={}: an account is renamed once, and two accounts are never merged into one",
                    safe(o), safe(n), safe(old), safe(new)
                );
            }
            pairs.push((old.to_string(), new.to_string()));
            Ok(())
        };
        for m in &self.map_user {
            add(m, "--map-user")?;
        }
        if let Some(path) = &self.map_users {
            let text = std::fs::read_to_string(path)
                .map_err(|e| anyhow::anyhow!("--map-users {}: {e}", path.display()))?;
            for (i, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if !line.is_empty() {
                    add(line, &format!("{}:{}", path.display(), i + 1))?;
                }
            }
        }
        Ok(pairs)
    }
}

/// Where a restore writes and how: the flags `restore` and `undelete` share.
#[derive(clap::Args, Debug)]
pub struct TargetArgs {
    /// Where to restore: `maildir:/srv/restore`, or a live server `imap://host[:port]`
    /// (`--starttls`) or `imaps://host[:port]`. Accounts are recreated below it as
    /// `<domain>/<user>/Maildir`; a single-Maildir snapshot restores into it directly.
    /// Or an export (restore only): `mbox:DIR` (one mboxrd file per folder, Thunderbird's
    /// tree) or `eml:DIR` (one `.eml` per message, flags in `.mailvault-flags`), each
    /// account in `DIR/<domain>/<user>`.
    #[arg(long)]
    pub target: String,
    #[command(flatten)]
    pub imap: super::imap::ImapArgs,
    /// IMAP: at most this many messages per second over all connections.
    #[arg(long)]
    pub max_rate: Option<f64>,
    /// IMAP: look for every message in the target folder (Message-ID, size, date) and
    /// send only those it lacks.
    #[arg(long)]
    pub skip_existing: bool,
    /// IMAP: the journal directory (default: $XDG_CACHE_HOME/mailvault/imap-journal).
    #[arg(long)]
    pub journal: Option<std::path::PathBuf>,
    /// IMAP: create the accounts the server does not have yet (Cyrus: the admin, given
    /// with --imap-master-user, CREATEs `user/<account>`). Dovecot needs nothing.
    #[arg(long)]
    pub create_accounts: bool,
    /// IMAP: most messages per APPEND batch.
    #[arg(long, default_value_t = 500)]
    pub batch: usize,
    /// Maildir, as root: give files and directories their recorded uid and gid as numbers
    /// (by default owners are mapped by their recorded user and group names).
    #[arg(long, conflicts_with = "chown")]
    pub numeric_owner: bool,
    /// Maildir, as root: give every restored file and directory this owner
    /// (`USER:GROUP`, names or numbers), e.g. `vmail:vmail` on another server.
    #[arg(long, value_name = "USER:GROUP")]
    pub chown: Option<String>,
}

impl TargetArgs {
    /// Whether the target is an IMAP server.
    pub fn is_imap(&self) -> bool {
        super::imap::is_imap(&self.target)
    }

    /// Refuses the IMAP flags for a target that is not an IMAP server.
    fn no_imap_flags(&self) -> Result<()> {
        if self.imap.any_given()
            || self.skip_existing
            || self.create_accounts
            || self.max_rate.is_some()
            || self.journal.is_some()
        {
            anyhow::bail!("the IMAP flags only apply to imap:// and imaps:// targets");
        }
        Ok(())
    }

    /// Refuses the owner flags for a target that is not a Maildir.
    fn no_owner_flags(&self) -> Result<()> {
        if self.numeric_owner || self.chown.is_some() {
            anyhow::bail!("--numeric-owner and --chown only apply to Maildir targets");
        }
        Ok(())
    }

    /// The options of a restore of `select` to a Maildir target.
    pub fn maildir_options(&self, g: &GlobalOpts, select: Selection) -> Result<RestoreOptions> {
        self.no_imap_flags()?;
        let target = super::maildir_location(&self.target, "target")?;
        let owners = match (&self.chown, self.numeric_owner) {
            (Some(spec), _) => RestoreOwners::chown(spec)?,
            (None, true) => RestoreOwners::Numeric,
            (None, false) => RestoreOwners::ByName,
        };
        Ok(RestoreOptions {
            select: Selection {
                reads: g.storage.store_connections.unwrap_or(0),
                ..select
            },
            target,
            jobs: repo::jobs(g),
            owners,
        })
    }

    /// The options of a restore of `select` into an IMAP server.
    pub fn imap_options(&self, select: Selection) -> Result<ImapRestoreOptions> {
        self.no_owner_flags()?;
        let connection = self.imap.connection(&self.target)?;
        let mut opts = ImapRestoreOptions::new(&select.snapshot, connection);
        opts.select = Selection {
            cache_bytes: opts.select.cache_bytes,
            ..select
        };
        opts.connections = self.imap.connections.max(1);
        opts.parallel_accounts = self.imap.accounts.max(1);
        opts.max_rate = self.max_rate;
        opts.skip_existing = self.skip_existing;
        opts.create_accounts = self.create_accounts;
        opts.batch_messages = self.batch.max(1);
        opts.sieve_port = self.imap.sieve_port;
        if let Some(j) = &self.journal {
            opts.journal_dir = j.clone();
        }
        Ok(opts)
    }
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    if a.dry_run {
        return run_dry(g, &a);
    }
    if a.to.is_imap() {
        return run_imap(g, a);
    }
    match super::location(&a.to.target, "target", super::Role::Mail)? {
        super::Location::Mbox(p) => return run_export(g, a, p, Export::Mbox),
        super::Location::Eml(p) => return run_export(g, a, p, Export::Eml),
        super::Location::Files(_) => {
            anyhow::bail!(
                "target {:?}: file: is a backup source; restore files to dir:DIR",
                a.to.target
            )
        }
        _ => {}
    }
    // `dir:DIR`: a plain directory tree (a `file:` snapshot's files at their paths).
    let plain = match super::location(&a.to.target, "target", super::Role::Mail)? {
        super::Location::Plain(p) => Some(p),
        _ => None,
    };
    let mut a = a;
    if let Some(p) = &plain {
        // A plain path now (`maildir_options` reads it as a directory).
        a.to.target = format!("maildir:{}", p.display());
    }
    let opts = a.to.maildir_options(g, a.selection()?)?;
    let r = repo::open(g)?;
    let rep = Bar::run(g.quiet || g.json, "restore", |bar| match plain {
        Some(_) => {
            use mailvault_core::dest::maildir::MaildirTarget;
            let open = |o: mailvault_core::ops::restore::Opening<'_>| {
                MaildirTarget::plain(&opts.target, opts.owners, o.owners, opts.jobs)
            };
            let request = Request::Selection(opts.select.clone());
            mailvault_core::ops::restore::run(&r, request, bar, open).map(|x| x.0)
        }
        None => restore(&r, &opts, bar),
    })?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_report(&rep, &opts);
    }
    Ok(outcome(rep.items_failed, &rep.failures))
}

/// The export formats a restore writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Export {
    Mbox,
    Eml,
}

/// `restore --target mbox:DIR` or `eml:DIR`.
fn run_export(g: &GlobalOpts, a: Args, dir: std::path::PathBuf, fmt: Export) -> Result<Outcome> {
    use mailvault_core::dest::{eml::EmlTarget, mbox::MboxTarget};
    use mailvault_core::ops::restore::run;
    a.to.no_imap_flags()?;
    a.to.no_owner_flags()?;
    let sel = Selection {
        reads: g.storage.store_connections.unwrap_or(0),
        cache_bytes: Selection::CACHE_BYTES,
        ..a.selection()?
    };
    let jobs = repo::jobs(g);
    let r = repo::open(g)?;
    let rep = Bar::run(g.quiet || g.json, "restore", |bar| match fmt {
        Export::Mbox => {
            let request = Request::Selection(sel.clone());
            run(&r, request, bar, |_| MboxTarget::open(&dir, jobs)).map(|x| x.0)
        }
        Export::Eml => {
            let request = Request::Selection(sel.clone());
            run(&r, request, bar, |_| EmlTarget::open(&dir, jobs)).map(|x| x.0)
        }
    })?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        let scheme = if fmt == Export::Mbox { "mbox" } else { "eml" };
        println!(
            "restored snapshot {} to {scheme}:{}",
            &rep.snapshot[..8],
            safe(&dir.display().to_string())
        );
        print_counts(&rep);
    }
    Ok(outcome(rep.items_failed, &rep.failures))
}

fn print_report(r: &RestoreReport, o: &RestoreOptions) {
    println!(
        "restored snapshot {} to {}",
        &r.snapshot[..8],
        safe(&o.target.display().to_string())
    );
    print_counts(r);
}

/// A Maildir restore's report but its first line.
pub fn print_counts(r: &RestoreReport) {
    println!("  accounts   {}, folders {}", r.accounts, r.folders);
    println!(
        "  messages   {} total: {} restored, {} already there, {} failed",
        r.items_total, r.items_restored, r.items_unchanged, r.items_failed
    );
    if r.files_restored + r.files_linked + r.files_unchanged > 0 {
        let links = match r.files_linked {
            0 => String::new(),
            n => format!(" and {}", count(n, "hard link", "hard links")),
        };
        println!(
            "  files      {} restored ({}){links}, {} already there",
            r.files_restored,
            bytes(r.file_bytes_written),
            r.files_unchanged
        );
    }
    println!(
        "  written    {} in {:.2} s: {:.0} messages/s, {:.1} MB/s",
        bytes(r.bytes_written + r.file_bytes_written),
        r.elapsed_secs,
        r.items_per_sec,
        r.mb_per_sec
    );
    for w in &r.warnings {
        println!("warning: {}", safe(w));
    }
    print_failures(&r.failures);
    if r.items_not_tried + r.files_not_tried > 0 {
        let files = match r.files_not_tried {
            0 => String::new(),
            n => format!(" and {}", count(n, "folder file", "folder files")),
        };
        println!(
            "{}{files} not tried: the target takes no more (the failure above says why); make room and run the restore again: what was restored is found and kept",
            count(r.items_not_tried, "message", "messages")
        );
    }
}

fn run_imap(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let opts = a.to.imap_options(a.selection()?)?;
    let r = repo::open(g)?;
    let rep = Bar::run(g.quiet || g.json, "restore", |bar| {
        imap_restore(&r, &opts, bar)
    })?;
    if g.json {
        crate::output::json(&rep)?;
    } else {
        print_imap_report(&rep);
    }
    Ok(outcome(rep.items_failed, &rep.failures))
}

/// Exit code 1 whenever the report lists a failure, even one that is not a message.
pub fn outcome(items_failed: u64, failures: &[mailvault_core::report::Failure]) -> Outcome {
    if items_failed > 0 || !failures.is_empty() {
        Outcome::Partial
    } else {
        Outcome::Ok
    }
}

fn print_imap_report(r: &ImapRestoreReport) {
    println!(
        "restored snapshot {} to {}",
        &r.snapshot[..8],
        safe(&r.target)
    );
    print_imap_counts(r);
}

/// An IMAP restore's report but its first line.
pub fn print_imap_counts(r: &ImapRestoreReport) {
    if r.accounts_created > 0 {
        println!(
            "  accounts   {} ({} created), folders {}",
            r.accounts, r.accounts_created, r.folders
        );
    } else {
        println!("  accounts   {}, folders {}", r.accounts, r.folders);
    }
    println!(
        "  messages   {} total: {} appended, {} done by an earlier run, {} found on the server, {} failed",
        r.items_total, r.items_appended, r.items_journaled, r.items_existing, r.items_failed
    );
    for p in &r.phases {
        println!(
            "  {:<12} {} items in {:.2} s ({:.0}/s): {}",
            p.name,
            p.items,
            p.secs,
            p.items_per_sec,
            safe(&p.note)
        );
    }
    if r.per_account.len() <= 20 {
        for a in &r.per_account {
            println!(
                "  account {}: {} messages, {} appended, {} skipped, {} failed, {:.2} s",
                safe(&a.account),
                a.messages,
                a.appended,
                a.skipped,
                a.failed,
                a.secs
            );
        }
    }
    if r.items_appended == 0 {
        println!("  written    nothing, in {:.2} s", r.elapsed_secs);
    } else {
        println!(
            "  written    {} in {:.2} s: {:.0} messages/s, {:.1} MB/s",
            bytes(r.bytes_appended),
            r.elapsed_secs,
            r.items_per_sec,
            r.mb_per_sec
        );
    }
    println!("  journal    {}", safe(&r.journal));
    for w in &r.warnings {
        println!("warning: {}", safe(w));
    }
    print_failures(&r.failures);
}

/// `restore --dry-run`: the plan of the selection, nothing opened or written.
fn run_dry(g: &GlobalOpts, a: &Args) -> Result<Outcome> {
    use mailvault_core::restore::plan::Plan;
    let r = repo::open(g)?;
    let plan = Plan::build(&r, &a.selection()?)?;
    let s = plan.summary(&r);
    if g.json {
        crate::output::json(&s)?;
        return Ok(outcome(0, &s.failures));
    }
    println!(
        "dry run: restore of snapshot {} would write nothing until run without --dry-run",
        &s.snapshot[..8]
    );
    for acc in &s.accounts {
        println!("account {}", safe(&acc.name));
        for f in &acc.folders {
            println!(
                "  {}: {}, {}",
                safe(&f.name),
                count(f.messages, "message", "messages"),
                bytes(f.bytes)
            );
        }
    }
    println!(
        "{}, {}; {} in {} to read ({}), in this order:",
        count(s.messages, "message", "messages"),
        bytes(s.bytes),
        count(s.spans.len() as u64, "span", "spans"),
        count(s.packs, "pack", "packs"),
        bytes(s.span_bytes)
    );
    for sp in &s.spans {
        println!(
            "  pack {} offset {} length {}",
            &sp.pack[..16],
            sp.offset,
            sp.len
        );
    }
    print_failures(&s.failures);
    Ok(outcome(0, &s.failures))
}
