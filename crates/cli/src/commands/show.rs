//! `mailvault show`

use crate::output::{bytes, safe, time};
use crate::{repo, GlobalOpts, Outcome};
use anyhow::{bail, Result};
use mailvault_core::search::show::show;
use std::io::{IsTerminal, Write};

#[derive(clap::Args, Debug)]
pub struct Args {
    /// The message's id as `search` prints it (at least 12 hex digits of it).
    pub message: String,
    /// Write the message as it was stored, byte for byte (not to a terminal).
    #[arg(long)]
    pub raw: bool,
}

pub fn run(g: &GlobalOpts, a: Args) -> Result<Outcome> {
    if a.raw && std::io::stdout().is_terminal() {
        bail!("--raw writes the message's bytes as they are: redirect them to a file or a pipe");
    }
    let s = repo::with_fresh_index(g, |r| {
        let cache = repo::search_cache(g, r)?;
        show(r, Some(cache.path()), &a.message)
    })?;
    if a.raw {
        std::io::stdout().lock().write_all(&s.raw)?;
        return Ok(Outcome::Ok);
    }
    if g.json {
        crate::output::json(&s)?;
        return Ok(Outcome::Ok);
    }
    println!("Id:       {}", s.id);
    println!(
        "Where:    {}/{} ({}), snapshot {}",
        safe(&s.account),
        safe(&s.folder),
        safe(&s.key),
        &s.snapshot[..8]
    );
    println!("From:     {}", safe(&s.message.from));
    println!("To:       {}", safe(&s.message.to));
    if !s.message.cc.is_empty() {
        println!("Cc:       {}", safe(&s.message.cc));
    }
    if let Some(d) = s.message.date {
        println!("Date:     {}", time(d));
    }
    println!("Subject:  {}", safe(&s.message.subject));
    println!("Size:     {}", bytes(s.size));
    for at in &s.message.attachments {
        println!(
            "Attached: {} ({}, {})",
            safe(at.name.as_deref().unwrap_or("(no name)")),
            safe(&at.content_type),
            bytes(at.size as u64)
        );
    }
    println!();
    for line in s.message.text.lines() {
        println!("{}", safe(line));
    }
    Ok(Outcome::Ok)
}
