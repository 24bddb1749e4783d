//! `mailvault forget`

use crate::output::safe;
use crate::{repo, GlobalOpts, Outcome};
use anyhow::Result;
use mailvault_core::ops::forget::{forget, ForgetOptions, ForgetReport, GroupBy, Policy, Within};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Snapshots to remove (id prefixes or `latest`), instead of a policy.
    pub snapshots: Vec<String>,
    /// Keep the N newest snapshots (`unlimited`: all).
    #[arg(long, value_name = "N", value_parser = count)]
    pub keep_last: Option<u32>,
    /// Keep the newest snapshot of each of the N newest hours that have one.
    #[arg(long, value_name = "N", value_parser = count)]
    pub keep_hourly: Option<u32>,
    /// Keep the newest snapshot of each of the N newest days that have one.
    #[arg(long, value_name = "N", value_parser = count)]
    pub keep_daily: Option<u32>,
    /// Keep the newest snapshot of each of the N newest ISO weeks that have one.
    #[arg(long, value_name = "N", value_parser = count)]
    pub keep_weekly: Option<u32>,
    /// Keep the newest snapshot of each of the N newest months that have one.
    #[arg(long, value_name = "N", value_parser = count)]
    pub keep_monthly: Option<u32>,
    /// Keep the newest snapshot of each of the N newest years that have one.
    #[arg(long, value_name = "N", value_parser = count)]
    pub keep_yearly: Option<u32>,
    /// Keep every snapshot within DURATION (`2y5m7d3h`: years, months, days, hours) of
    /// the newest one.
    #[arg(long, value_name = "DURATION")]
    pub keep_within: Option<Within>,
    /// Keep the newest snapshot of each hour within DURATION of the newest one.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_hourly: Option<Within>,
    /// Keep the newest snapshot of each day within DURATION of the newest one.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_daily: Option<Within>,
    /// Keep the newest snapshot of each week within DURATION of the newest one.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_weekly: Option<Within>,
    /// Keep the newest snapshot of each month within DURATION of the newest one.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_monthly: Option<Within>,
    /// Keep the newest snapshot of each year within DURATION of the newest one.
    #[arg(long, value_name = "DURATION")]
    pub keep_within_yearly: Option<Within>,
    /// Keep snapshots that have every tag of this comma-separated list (repeatable: any
    /// list; `''`: snapshots without tags).
    #[arg(long, value_name = "TAGS")]
    pub keep_tag: Vec<String>,
    /// Only snapshots of this host (repeatable).
    #[arg(long)]
    pub host: Vec<String>,
    /// Only snapshots that have every tag of this comma-separated list (repeatable: any
    /// list).
    #[arg(long, value_name = "TAGS")]
    pub tag: Vec<String>,
    /// Apply the policy to each group of snapshots with the same of these: `host`,
    /// `source`, `tags`, joined by commas (`''`: all snapshots in one group).
    #[arg(long, default_value = "host,source")]
    pub group_by: GroupBy,
    /// Print what would be removed; change nothing.
    #[arg(long, short = 'n')]
    pub dry_run: bool,
    /// Then remove the data only the removed snapshots used (`mailvault prune`).
    #[arg(long)]
    pub prune: bool,
}

/// A `--keep-*` count: a number, or `unlimited`.
fn count(s: &str) -> std::result::Result<u32, String> {
    match s {
        "unlimited" => Ok(mailvault_core::ops::forget::UNLIMITED),
        n => n
            .parse()
            .map_err(|_| format!("{s:?}: give a number of snapshots, or `unlimited`")),
    }
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    let policy = Policy {
        keep_last: a.keep_last.unwrap_or(0),
        keep_hourly: a.keep_hourly.unwrap_or(0),
        keep_daily: a.keep_daily.unwrap_or(0),
        keep_weekly: a.keep_weekly.unwrap_or(0),
        keep_monthly: a.keep_monthly.unwrap_or(0),
        keep_yearly: a.keep_yearly.unwrap_or(0),
        keep_within: a.keep_within,
        keep_within_hourly: a.keep_within_hourly,
        keep_within_daily: a.keep_within_daily,
        keep_within_weekly: a.keep_within_weekly,
        keep_within_monthly: a.keep_within_monthly,
        keep_within_yearly: a.keep_within_yearly,
        keep_tag: a.keep_tag,
    };
    let opts = ForgetOptions {
        snapshots: a.snapshots,
        policy,
        hosts: a.host,
        tags: a.tag,
        group_by: a.group_by,
        dry_run: a.dry_run,
        state: repo::state(),
    };
    let mut r = repo::open(g)?;
    if a.prune && !a.dry_run {
        // Refused before the forget writes anything: its prune could not run.
        r.refuse_if_append_only("forget --prune")?;
    }
    let rep = forget(&r, &opts)?;
    if !g.json {
        print_report(&rep);
    }
    // restic prunes only when snapshots were removed.
    let pruned = match a.prune && !rep.removed.is_empty() {
        true => Some(prune_step(g, &mut r, a.dry_run, &rep.removed)?),
        false => None,
    };
    if g.json {
        match pruned {
            Some(p) => crate::output::json(&serde_json::json!({ "forget": rep, "prune": p }))?,
            None => crate::output::json(&rep)?,
        }
    }
    Ok(match rep.held.is_empty() {
        true => Outcome::Ok,
        // Named for removal and kept: the caller should know.
        false => Outcome::Partial,
    })
}

/// Whether [`prune_step`] runs a prune (`mailvault_core::ops::prune`, from the branch that
/// brings it); until then `--prune` is refused before anything is removed.
/// `forget --prune`: the prune after the forget, with its default options (a dry run
/// when the forget was one); prints its report unless `--json`, and returns it for the
/// JSON. The forget holds no lock: the prune takes its exclusive one.
fn prune_step(
    g: &GlobalOpts,
    r: &mut mailvault_core::Repository,
    dry_run: bool,
    removed: &[String],
) -> Result<serde_json::Value> {
    use mailvault_core::ops::prune::{prune, PruneOptions};
    let opts = PruneOptions {
        dry_run,
        // A dry forget removed nothing: its prune plans as if it had.
        as_if_gone: (removed.iter())
            .filter_map(|id| mailvault_core::Id::from_hex(id))
            .collect(),
        ..Default::default()
    };
    let rep = prune(r, &opts, &mailvault_core::report::NoProgress)?;
    if !g.json {
        super::prune::print_report(&rep);
    }
    Ok(serde_json::to_value(&rep)?)
}

fn print_report(rep: &ForgetReport) {
    for w in &rep.warnings {
        eprintln!("warning: {}", safe(w));
    }
    if !rep.policy.is_empty() {
        println!("applying policy: {}", rep.policy);
    }
    for grp in &rep.groups {
        let mut what = Vec::new();
        if let Some(h) = &grp.host {
            what.push(format!("host {}", safe(h)));
        }
        if let Some(s) = &grp.source {
            what.push(format!("source {}", safe(s)));
        }
        if let Some(t) = &grp.tags {
            what.push(format!("tags [{}]", safe(&t.join(","))));
        }
        if !what.is_empty() {
            println!("\nsnapshots of {}:", what.join(", "));
        } else {
            println!();
        }
        println!(
            "{:<7} {:<10} {:<20} {:<14} {:<16} reasons",
            "", "id", "time (local)", "host", "tags"
        );
        for s in &grp.snapshots {
            let line = format!(
                "{:<7} {:<10} {:<20} {:<14} {:<16} {}",
                if s.keep { "keep" } else { "remove" },
                &s.id[..8],
                s.local_time,
                safe(&s.hostname),
                safe(&s.tags.join(",")),
                safe(&s.reasons.join(", "))
            );
            println!("{}", line.trim_end());
        }
    }
    let kept: usize =
        rep.groups.iter().map(|g| g.snapshots.len()).sum::<usize>() - rep.removed.len();
    let verb = if rep.dry_run {
        "would be removed"
    } else if rep.requested {
        "asked to be removed (this host is append-only: the maintenance host's `mailvault prune --apply-requests` removes them)"
    } else {
        "removed"
    };
    println!("\n{} snapshots {verb}, {kept} kept", rep.removed.len());
    if !rep.held.is_empty() {
        println!(
            "{} snapshots named are on legal hold (tag `hold`) and stay: remove the tag with `mailvault tag --remove hold` first",
            rep.held.len()
        );
    }
}
