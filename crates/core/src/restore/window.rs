//! The messages of a batch of folders handed to an [`Order::Any`](crate::dest::Order::Any)
//! restore in windows of at most [`Ctx::window`], each window a run of the packs that hold
//! them, so that memory follows the window, not the selection, and a pack is still read
//! about once.
//!
//! A folder's entries are stored in key order, but a backup writes a folder's messages
//! (and the folders of an account, and accounts) on several threads at once: its packs
//! hold runs of keys from several places interleaved, and windows taken in key order read
//! each of those packs once per interleaved run (measured: the `medium` preset's restore
//! read 25% more bytes in two key-order windows of 20,000, a test's three folders 3×). So
//! the entries are sorted by where their largest blob lies: those that fit one window are
//! sorted in memory; past that, each window's worth is sorted and written to an unnamed
//! temporary file as a run, sealed with a key made for this restore (nothing readable
//! reaches the disk), and the runs are merged back, a block of each in memory at a time.

use super::ctx::Ctx;
use super::plan::FolderPlan;
use crate::repo::crypto::MasterKey;
use crate::repo::tree::MessageEntry;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::fs::File;
use std::os::unix::fs::FileExt;

/// Entries of a run sealed together in its file. The merge holds a block of each run:
/// with windows of 32,768 messages, 1.5 million messages are 46 runs, 2,944 entries.
pub(super) const BLOCK: usize = 64;

/// An entry as a restore keeps it (From and Subject dropped: they are for `ls`), where
/// its first blob lies and the index of its folder in the batch.
#[derive(Serialize, Deserialize)]
struct Kept {
    at: u64,
    folder: u32,
    entry: MessageEntry,
}

impl Kept {
    fn of(at: u64, folder: usize, mut entry: MessageEntry) -> Kept {
        (entry.from, entry.subject) = (String::new(), String::new());
        Kept {
            at,
            folder: folder as u32,
            entry,
        }
    }

    fn entry(self) -> (usize, MessageEntry) {
        (self.folder as usize, self.entry)
    }
}

/// Hands the messages of `plans` (not taken yet) to `each` in windows of at most
/// [`Ctx::window`], each with the index of its folder in `plans`, in the order their first
/// blobs lie in the packs.
pub(super) fn windows<T>(
    ctx: &Ctx<T>,
    plans: &mut [FolderPlan],
    mut each: impl FnMut(Vec<(usize, MessageEntry)>),
) {
    let index = ctx.repo.index();
    // Where its largest blob lies: a message whose body is shared with an earlier one
    // (the same message in several mailboxes) goes with the body, and its window reads
    // only its small unique part (the trace headers) from elsewhere.
    let at = |e: &MessageEntry| {
        let locs = e.content.iter().filter_map(|id| index.get(id));
        let loc = locs.max_by_key(|l| l.raw_len);
        loc.map_or(u64::MAX, |l| u64::from(l.pack) << 32 | u64::from(l.offset))
    };
    let window = ctx.window.max(1);
    let mut buf: Vec<Kept> = Vec::new();
    let mut runs: Option<Runs> = None;
    // By index: the test hook counts the messages every plan holds.
    #[allow(clippy::needless_range_loop)]
    for i in 0..plans.len() {
        loop {
            let got = plans[i].next_window(ctx, window - buf.len());
            if got.is_empty() {
                break;
            }
            buf.extend(got.into_iter().map(|e| Kept::of(at(&e), i, e)));
            #[cfg(test)]
            ctx.n
                .held(buf.len() + plans.iter().map(|p| p.entries.len()).sum::<usize>());
            if buf.len() >= window {
                buf.sort_by_key(|k| k.at);
                let r = runs.get_or_insert_with(Runs::new);
                if let Err(e) = r.write(&buf) {
                    // No file: this window goes as it is, in key order.
                    tracing::warn!("restore: cannot write its temporary file: {e}");
                    each(buf.drain(..).map(Kept::entry).collect());
                }
                buf.clear();
            }
        }
    }
    buf.sort_by_key(|k| k.at);
    let Some(mut runs) = runs.filter(|r| !r.runs.is_empty()) else {
        if !buf.is_empty() {
            each(buf.into_iter().map(Kept::entry).collect());
        }
        return;
    };
    if let Err(e) = runs.write(&buf) {
        tracing::warn!("restore: cannot write its temporary file: {e}");
        each(buf.drain(..).map(Kept::entry).collect());
    }
    drop(buf);
    runs.merge(ctx, window, each);
}

/// A block of a run: its offset and length in the file, and its entries.
type Block = (u64, usize, u64);

/// Sorted runs of entries in an unnamed temporary file.
struct Runs {
    file: Option<File>,
    key: MasterKey,
    end: u64,
    /// Per run: its blocks.
    runs: Vec<Vec<Block>>,
}

impl Runs {
    fn new() -> Runs {
        Runs {
            file: None,
            key: MasterKey::random(),
            end: 0,
            runs: Vec::new(),
        }
    }

    /// Writes `sorted` as a run.
    fn write(&mut self, sorted: &[Kept]) -> std::io::Result<()> {
        if sorted.is_empty() {
            return Ok(());
        }
        if self.file.is_none() {
            self.file = Some(tempfile::tempfile()?);
        }
        let file = self.file.as_ref().expect("created above");
        let mut blocks = Vec::new();
        for block in sorted.chunks(BLOCK) {
            let plain = postcard::to_allocvec(block).map_err(std::io::Error::other)?;
            let sealed = self.key.seal(&plain);
            file.write_all_at(&sealed, self.end)?;
            blocks.push((self.end, sealed.len(), block.len() as u64));
            self.end += sealed.len() as u64;
        }
        self.runs.push(blocks);
        Ok(())
    }

    /// A block of the file, opened.
    fn read(&self, (offset, len, _): Block) -> crate::Result<Vec<Kept>> {
        let file = self.file.as_ref().expect("a run was written");
        let mut sealed = vec![0; len];
        file.read_exact_at(&mut sealed, offset)
            .map_err(|e| crate::Error::io("restore's temporary file", e))?;
        let plain = self.key.open(&sealed, "restore's temporary file")?;
        postcard::from_bytes(&plain)
            .map_err(|e| crate::Error::corrupt("restore's temporary file", e.to_string()))
    }

    /// Merges the runs, handing windows of `window` entries to `each`.
    fn merge(
        &self,
        ctx: &Ctx<impl Sized>,
        window: usize,
        mut each: impl FnMut(Vec<(usize, MessageEntry)>),
    ) {
        // Per run: its next blocks, and the entries of the block being merged.
        type Head<'a> = (std::slice::Iter<'a, Block>, std::vec::IntoIter<Kept>);
        let mut heads: Vec<Head> = (self.runs.iter())
            .map(|r| (r.iter(), Vec::new().into_iter()))
            .collect();
        let mut heap = BinaryHeap::new();
        let next = |r: usize, heads: &mut Vec<Head>| loop {
            let (blocks, block) = &mut heads[r];
            if let Some(k) = block.next() {
                return Some(k);
            }
            let b = *blocks.next()?;
            match self.read(b) {
                Ok(entries) => *block = entries.into_iter(),
                // Its messages cannot be restored.
                Err(e) => ctx.n.fail_items("restore's temporary file", e, b.2),
            }
        };
        let mut current: Vec<Option<Kept>> = Vec::new();
        for r in 0..heads.len() {
            let k = next(r, &mut heads);
            if let Some(k) = &k {
                heap.push(Reverse((k.at, r)));
            }
            current.push(k);
        }
        let mut out = Vec::new();
        while let Some(Reverse((_, r))) = heap.pop() {
            let k = current[r].take().expect("a run in the heap has a head");
            out.push(k.entry());
            current[r] = next(r, &mut heads);
            if let Some(k) = &current[r] {
                heap.push(Reverse((k.at, r)));
            }
            if out.len() >= window {
                #[cfg(test)]
                ctx.n
                    .held(out.len() + heads.iter().map(|h| h.1.len()).sum::<usize>());
                each(std::mem::take(&mut out));
            }
        }
        if !out.is_empty() {
            each(out);
        }
    }
}
