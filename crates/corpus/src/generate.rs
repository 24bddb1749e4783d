//! `generate`: plan a store from a spec, then render and write its messages on a few
//! threads. Each message depends only on its own seed, so the tree is byte-identical
//! whatever the thread count or scheduling.

use std::collections::HashSet;
use std::fs;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::maildir::{at, create_layout, file_name, set_time, store_dirs, write_message};
use crate::plan::{plan, Event, Odd, PlanParams};
use crate::render::{bare_lfs, render_shared, render_trace, Scratch};
use crate::rng::rng_for;
use crate::spec::{AccountSummary, CorpusSpec, CorpusSummary};
use crate::world::World;

/// Messages and bytes written, per account.
#[derive(Debug, Clone)]
pub(crate) struct Tally {
    pub per_account: Vec<(usize, u64)>,
}

impl Tally {
    fn new(accounts: usize) -> Tally {
        Tally {
            per_account: vec![(0, 0); accounts],
        }
    }

    fn merge(&mut self, other: &Tally) {
        for (a, b) in self.per_account.iter_mut().zip(&other.per_account) {
            a.0 += b.0;
            a.1 += b.1;
        }
    }

    pub(crate) fn messages(&self) -> usize {
        self.per_account.iter().map(|a| a.0).sum()
    }

    pub(crate) fn bytes(&self) -> u64 {
        self.per_account.iter().map(|a| a.1).sum()
    }
}

/// Threads for rendering: the machine's cores, at most 8.
fn threads() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
        .clamp(1, 8)
}

fn write_event(
    root: &Path,
    w: &World,
    evs: &[Event],
    i: usize,
    bufs: &mut Buffers,
    tally: &mut Tally,
) -> io::Result<()> {
    render_shared(w, evs, i, &mut bufs.shared, &mut bufs.scratch);
    let shared_lfs = bare_lfs(&bufs.shared);
    for (di, d) in evs[i].deliveries.iter().enumerate() {
        render_trace(w, &evs[i], di, &mut bufs.trace);
        let size = bufs.trace.len() + bufs.shared.len();
        let vsize = size + bare_lfs(&bufs.trace) + shared_lfs;
        let acct = &w.accounts[d.account];
        let path = acct
            .sub_dir(root, d.folder, d.new)
            .join(file_name(&d.key, size, vsize, d.new, &d.flags));
        write_message(&path, &[&bufs.trace, &bufs.shared], d.time)?;
        let t = &mut tally.per_account[d.account];
        t.0 += 1;
        t.1 += size as u64;
    }
    Ok(())
}

#[derive(Default)]
struct Buffers {
    shared: Vec<u8>,
    trace: Vec<u8>,
    scratch: Scratch,
}

/// Renders and writes every planned file under `root` (folders must exist).
pub(crate) fn write_events(root: &Path, w: &World, evs: &[Event]) -> io::Result<Tally> {
    const CHUNK: usize = 8;
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let worker = || -> io::Result<Tally> {
        let mut tally = Tally::new(w.accounts.len());
        let mut bufs = Buffers::default();
        loop {
            let start = next.fetch_add(CHUNK, Ordering::Relaxed);
            if start >= evs.len() || failed.load(Ordering::Relaxed) {
                return Ok(tally);
            }
            for i in start..(start + CHUNK).min(evs.len()) {
                if let Err(e) = write_event(root, w, evs, i, &mut bufs, &mut tally) {
                    failed.store(true, Ordering::Relaxed);
                    return Err(e);
                }
            }
        }
    };
    let results: Vec<io::Result<Tally>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads()).map(|_| s.spawn(worker)).collect();
        handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(io::Error::other("a corpus writer thread panicked")))
            })
            .collect()
    });
    let mut total = Tally::new(w.accounts.len());
    for r in results {
        total.merge(&r?);
    }
    Ok(total)
}

fn ensure_empty(root: &Path) -> io::Result<()> {
    match fs::read_dir(root) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    format!(
                        "{}: not empty; generate needs an empty or missing directory",
                        root.display()
                    ),
                ));
            }
            Ok(())
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(at(root)(e)),
    }
}

/// Writes the store `spec` describes under `root` (`ROOT/<domain>/<user>/Maildir`);
/// `root` must be missing or empty. The same spec always gives the same tree, file
/// names, contents and times.
pub fn generate(spec: &CorpusSpec, root: &Path) -> io::Result<CorpusSummary> {
    spec.validate()?;
    ensure_empty(root)?;
    let world = World::generated(spec);
    let params = PlanParams {
        messages: spec.messages,
        shared_ratio: spec.shared_ratio,
        attachment_ratio: spec.attachment_ratio,
        median_attachment: spec.median_attachment_bytes,
        max_attachment: spec.max_attachment_bytes,
        forward_ratio: spec.forward_ratio,
        html_ratio: spec.html_ratio,
        odd_ratio: spec.odd_ratio,
        start: spec.start_time,
        end: spec.end_time,
        mutation: false,
    };
    let mut keys = HashSet::new();
    let events = plan(&world, &params, &mut rng_for(spec.seed, 2), &mut keys);
    drop(keys);
    create_layout(root, &world, spec.end_time)?;
    let tally = write_events(root, &world, &events)?;
    for dir in store_dirs(root, &world) {
        set_time(&dir, spec.end_time)?;
    }
    let files = |f: &dyn Fn(&Event) -> bool| -> usize {
        events
            .iter()
            .filter(|e| f(e))
            .map(|e| e.deliveries.len())
            .sum()
    };
    Ok(CorpusSummary {
        accounts: world.accounts.len(),
        domains: world.domains.len(),
        folders: world.accounts.iter().map(|a| a.folders.len()).sum(),
        messages: tally.messages(),
        bytes: tally.bytes(),
        copies: events.iter().map(Event::copies).sum(),
        attachments: files(&|e| !e.attachments.is_empty()),
        forwarded: files(&|e| e.forward),
        odd: files(&|e| e.odd != Odd::None),
        new_messages: events
            .iter()
            .flat_map(|e| &e.deliveries)
            .filter(|d| d.new)
            .count(),
        per_account: world
            .accounts
            .iter()
            .zip(&tally.per_account)
            .map(|(a, &(messages, bytes))| AccountSummary {
                address: a.address.clone(),
                maildir: a.maildir.clone(),
                messages,
                bytes,
            })
            .collect(),
    })
}
