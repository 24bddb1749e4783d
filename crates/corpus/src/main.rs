//! `mailvault-corpus`: generate, mutate, import and count test mail stores. A thin layer:
//! each subcommand fills a spec and calls one library function.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, Subcommand};
use mailvault_corpus::{
    generate, import_eml_dir, mutate, scan, AccountSummary, CorpusSpec, ImportSpec, MutationSpec,
    PRESETS,
};

#[derive(Parser)]
#[command(
    name = "mailvault-corpus",
    version,
    about = "Deterministic realistic Maildir mail stores for tests and benchmarks"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write a mail store OUT_DIR/<domain>/<user>/Maildir (OUT_DIR must be missing or empty).
    Generate {
        /// Size preset: tiny (300 messages), small (10k), medium (30k), large (100k, ~4 GB), huge (300k).
        #[arg(long, default_value = "small")]
        preset: String,
        /// Seed: the same seed and preset give a byte-identical tree.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Override the preset's message count.
        #[arg(long)]
        messages: Option<usize>,
        /// Override the preset's account count.
        #[arg(long)]
        accounts: Option<usize>,
        /// Override the preset's domain count.
        #[arg(long)]
        domains: Option<usize>,
        /// Fraction of messages that are per-recipient copies (default 0.5).
        #[arg(long)]
        shared_ratio: Option<f64>,
        /// Fraction of messages with attachments (default 0.12).
        #[arg(long)]
        attachment_ratio: Option<f64>,
        /// Print the summary as one JSON object.
        #[arg(long)]
        json: bool,
        out_dir: PathBuf,
    },
    /// Apply a day of changes to a store: flag renames, new messages, deletions.
    Mutate {
        #[arg(long, default_value_t = 2)]
        seed: u64,
        #[arg(long, default_value_t = 0.05)]
        flag_rename_ratio: f64,
        #[arg(long, default_value_t = 0.01)]
        new_ratio: f64,
        #[arg(long, default_value_t = 0.005)]
        delete_ratio: f64,
        #[arg(long)]
        json: bool,
        root: PathBuf,
    },
    /// File a directory of .eml files (e.g. the SpamAssassin corpus) into a Maildir, bytes unchanged.
    ImportEml {
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Fraction of non-spam messages filed in Archive.
        #[arg(long, default_value_t = 0.3)]
        archive_ratio: f64,
        #[arg(long)]
        json: bool,
        src_dir: PathBuf,
        maildir: PathBuf,
    },
    /// Count the accounts, messages and bytes of a store.
    Stats {
        #[arg(long)]
        json: bool,
        root: PathBuf,
    },
    /// List the presets.
    Presets,
}

/// Minimal JSON string escaping.
fn js(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn account_json(a: &AccountSummary) -> String {
    format!(
        "{{\"address\":{},\"maildir\":{},\"messages\":{},\"bytes\":{}}}",
        js(&a.address),
        js(&a.maildir.to_string_lossy()),
        a.messages,
        a.bytes
    )
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn run(cli: Cli) -> std::io::Result<()> {
    let started = Instant::now();
    match cli.command {
        Command::Generate {
            preset,
            seed,
            messages,
            accounts,
            domains,
            shared_ratio,
            attachment_ratio,
            json,
            out_dir,
        } => {
            let base = CorpusSpec::preset(&preset).ok_or_else(|| {
                std::io::Error::new(
                    std::io::ErrorKind::InvalidInput,
                    format!(
                        "unknown preset {preset:?}; use one of {}",
                        PRESETS.join(", ")
                    ),
                )
            })?;
            let spec = CorpusSpec {
                seed,
                messages: messages.unwrap_or(base.messages),
                accounts: accounts.unwrap_or(base.accounts),
                domains: domains.unwrap_or(base.domains),
                shared_ratio: shared_ratio.unwrap_or(base.shared_ratio),
                attachment_ratio: attachment_ratio.unwrap_or(base.attachment_ratio),
                ..base
            };
            let s = generate(&spec, &out_dir)?;
            let secs = started.elapsed().as_secs_f64();
            let largest = s.largest_account();
            if json {
                println!(
                    "{{\"preset\":{},\"seed\":{},\"root\":{},\"accounts\":{},\"domains\":{},\"folders\":{},\"messages\":{},\"bytes\":{},\"copies\":{},\"attachments\":{},\"forwarded\":{},\"odd\":{},\"new_messages\":{},\"largest_account\":{},\"elapsed_secs\":{:.3},\"per_account\":[{}]}}",
                    js(&preset),
                    seed,
                    js(&out_dir.to_string_lossy()),
                    s.accounts,
                    s.domains,
                    s.folders,
                    s.messages,
                    s.bytes,
                    s.copies,
                    s.attachments,
                    s.forwarded,
                    s.odd,
                    s.new_messages,
                    largest.map_or("null".to_string(), account_json),
                    secs,
                    s.per_account.iter().map(account_json).collect::<Vec<_>>().join(",")
                );
            } else {
                println!(
                    "generated {} (preset {preset}, seed {seed}) in {secs:.1}s",
                    out_dir.display()
                );
                println!(
                    "  accounts     {} in {} domains, {} folders",
                    s.accounts, s.domains, s.folders
                );
                println!(
                    "  messages     {} ({}), {} in new/",
                    s.messages,
                    mb(s.bytes),
                    s.new_messages
                );
                println!(
                    "  copies       {} ({:.1}% per-recipient copies)",
                    s.copies,
                    100.0 * s.copies as f64 / s.messages.max(1) as f64
                );
                println!(
                    "  attachments  {} messages, {} forwarding an earlier one",
                    s.attachments, s.forwarded
                );
                println!("  odd          {}", s.odd);
                if let Some(a) = largest {
                    println!(
                        "  largest      {} ({} messages, {})",
                        a.address,
                        a.messages,
                        mb(a.bytes)
                    );
                }
            }
        }
        Command::Mutate {
            seed,
            flag_rename_ratio,
            new_ratio,
            delete_ratio,
            json,
            root,
        } => {
            let spec = MutationSpec {
                seed,
                flag_rename_ratio,
                new_ratio,
                delete_ratio,
            };
            let s = mutate(&spec, &root)?;
            let secs = started.elapsed().as_secs_f64();
            if json {
                println!(
                    "{{\"seed\":{seed},\"messages_before\":{},\"flag_renames\":{},\"new_to_cur\":{},\"new_messages\":{},\"new_copies\":{},\"new_bytes\":{},\"deleted\":{},\"deleted_bytes\":{},\"messages_after\":{},\"elapsed_secs\":{secs:.3}}}",
                    s.messages_before, s.flag_renames, s.new_to_cur, s.new_messages, s.new_copies, s.new_bytes, s.deleted, s.deleted_bytes, s.messages_after
                );
            } else {
                println!("mutated {} (seed {seed}) in {secs:.1}s", root.display());
                println!(
                    "  flag renames {} ({} new/ -> cur/)",
                    s.flag_renames, s.new_to_cur
                );
                println!(
                    "  new          {} ({} copies, {})",
                    s.new_messages,
                    s.new_copies,
                    mb(s.new_bytes)
                );
                println!("  deleted      {} ({})", s.deleted, mb(s.deleted_bytes));
                println!(
                    "  messages     {} -> {}",
                    s.messages_before, s.messages_after
                );
            }
        }
        Command::ImportEml {
            seed,
            archive_ratio,
            json,
            src_dir,
            maildir,
        } => {
            let s = import_eml_dir(
                &src_dir,
                &maildir,
                &ImportSpec {
                    seed,
                    archive_ratio,
                },
            )?;
            let secs = started.elapsed().as_secs_f64();
            let folders = s
                .folders
                .iter()
                .map(|(f, n)| format!("{}:{n}", js(f)))
                .collect::<Vec<_>>()
                .join(",");
            if json {
                println!(
                    "{{\"messages\":{},\"bytes\":{},\"folders\":{{{folders}}},\"elapsed_secs\":{secs:.3}}}",
                    s.messages, s.bytes
                );
            } else {
                println!(
                    "imported {} messages ({}) into {} in {secs:.1}s",
                    s.messages,
                    mb(s.bytes),
                    maildir.display()
                );
                for (f, n) in &s.folders {
                    println!("  {f:<8} {n}");
                }
            }
        }
        Command::Stats { json, root } => {
            let s = scan(&root)?;
            let largest = s.largest_account();
            if json {
                println!(
                    "{{\"accounts\":{},\"folders\":{},\"messages\":{},\"bytes\":{},\"new_messages\":{},\"largest_account\":{},\"per_account\":[{}]}}",
                    s.accounts,
                    s.folders,
                    s.messages,
                    s.bytes,
                    s.new_messages,
                    largest.map_or("null".to_string(), account_json),
                    s.per_account.iter().map(account_json).collect::<Vec<_>>().join(",")
                );
            } else {
                println!(
                    "{}: {} accounts, {} folders",
                    root.display(),
                    s.accounts,
                    s.folders
                );
                println!(
                    "  messages {} ({}), {} in new/",
                    s.messages,
                    mb(s.bytes),
                    s.new_messages
                );
                if let Some(a) = largest {
                    println!(
                        "  largest  {} ({} messages, {})",
                        a.address,
                        a.messages,
                        mb(a.bytes)
                    );
                }
            }
        }
        Command::Presets => {
            for name in PRESETS {
                if let Some(p) = CorpusSpec::preset(name) {
                    println!(
                        "{name:<7} {:>7} messages {:>4} accounts {:>2} domains",
                        p.messages, p.accounts, p.domains
                    );
                }
            }
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("mailvault-corpus: {e}");
            ExitCode::FAILURE
        }
    }
}
