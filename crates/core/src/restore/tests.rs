mod spans {
    //! Issue 12: restores read pack spans, not blobs.
    use super::super::*;
    #[allow(unused_imports)]
    use super::super::{any_order::*, ctx::*, exec::*, in_order::*, plan::*};
    use crate::model::reader::Blobs;
    use crate::model::reader::{plan, read_by_packs, read_by_spans, PackPlan, SpanOptions};
    use crate::ops::restore::{restore, RestoreOptions};
    use crate::repo::crypto::KdfParams;
    use crate::repo::id::Id;
    use crate::repo::tree::{AccountTree, RootTree};
    use crate::repo::Repository;
    use crate::report::NoProgress;
    use crate::source::maildir::{BackupOptions, MaildirSource};
    use crate::source::RunOptions;
    use crate::store::{Backend, LocalStore, MemoryStore, Metered};
    use std::collections::BTreeMap;
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
    use std::sync::Arc;

    use crate::testing::data_reads::DataReads;
    use std::fs;
    use std::path::Path;

    fn recording(inner: Arc<dyn Backend>) -> Arc<DataReads> {
        DataReads::new(inner)
    }

    /// Incompressible-ish text, different for every seed.
    fn body(seed: u64, len: usize) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        (0..len)
            .map(|i| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                if i % 70 == 69 {
                    b'\n'
                } else {
                    b'a' + (x % 26) as u8
                }
            })
            .collect()
    }

    /// A Maildir of three folders (INBOX, .Sent, .Archive) with `n` messages each;
    /// every tenth message of `.Archive` is a copy of one in INBOX (one blob, two
    /// messages).
    fn maildir(root: &Path, n: u64) {
        maildir_from(root, n, 0)
    }

    /// [`maildir`] with its own messages for every `base`.
    fn maildir_from(root: &Path, n: u64, base: u64) {
        for (f, folder) in ["", ".Sent", ".Archive"].iter().enumerate() {
            for sub in ["cur", "new", "tmp"] {
                fs::create_dir_all(root.join(folder).join(sub)).unwrap();
            }
            let uidlist = format!("3 V{base} N{}\n", n + 1);
            fs::write(root.join(folder).join("dovecot-uidlist"), uidlist).unwrap();
            for i in 0..n {
                let seed = base
                    + if f == 2 && i % 10 == 0 {
                        i
                    } else {
                        f as u64 * n + i
                    };
                let mut m = format!("From: a@example.org\nSubject: {seed}\n\n").into_bytes();
                m.extend(body(seed, 2000 + (seed as usize * 37) % 5000));
                let name = format!("{}.M{f}P{i}.host:2,S", 1_600_000_000 + i);
                fs::write(root.join(folder).join("cur").join(name), m).unwrap();
            }
        }
    }

    /// Every file below `cur/` and `new/` of every folder, and its `dovecot-uidlist`,
    /// by path.
    fn messages(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
        let mut out = BTreeMap::new();
        for folder in ["", ".Sent", ".Archive"] {
            let uidlist = Path::new(folder).join("dovecot-uidlist");
            if let Ok(data) = fs::read(root.join(&uidlist)) {
                out.insert(uidlist, data);
            }
            for sub in ["cur", "new"] {
                let dir = root.join(folder).join(sub);
                for e in fs::read_dir(&dir).into_iter().flatten() {
                    let p = e.unwrap().path();
                    let rel = p.strip_prefix(root).unwrap().to_path_buf();
                    out.insert(rel, fs::read(&p).unwrap());
                }
            }
        }
        out
    }

    /// A repository with small packs (64 KiB) on `store`, holding a backup of `src`,
    /// opened again (as a restore opens it).
    fn backed_up(store: Arc<dyn Backend>, src: &Path) -> Repository {
        backed_up_accounts(store, src, vec!["bob".into()])
    }

    /// A store below `dir` of `users` at example.org, 15 messages each (5 per
    /// subfolder), backed up; and the selection of all of its latest snapshot.
    fn accounts_of_15(dir: &Path, users: &[&str]) -> (Repository, Selection) {
        let src = dir.join("src");
        for (i, user) in users.iter().enumerate() {
            let md = src.join("example.org").join(user).join("Maildir");
            maildir_from(&md, 5, 1000 * i as u64);
        }
        let repo = backed_up_accounts(Arc::new(MemoryStore::new()), &src, vec![]);
        let sel = Selection {
            snapshot: "latest".into(),
            accounts: vec![],
            folders: vec![],
            exact_folders: false,
            messages: vec![],
            reads: 0,
            cache_bytes: 0,
            part: Default::default(),
            map_users: vec![],
        };
        (repo, sel)
    }

    /// [`backed_up`] for a mail store of `accounts` (all: empty).
    fn backed_up_accounts(
        store: Arc<dyn Backend>,
        src: &Path,
        accounts: Vec<String>,
    ) -> Repository {
        let opts = crate::repo::InitOptions {
            kdf: KdfParams::FOR_TESTS,
            pack_size: 64 << 10,
            ..Default::default()
        };
        let mut repo = Repository::init(store.clone(), b"pw", &opts).unwrap();
        let opts = BackupOptions {
            source: src.to_path_buf(),
            accounts,
            jobs: 2,
            stat_unchanged: false,
            run: RunOptions::new("h"),
        };
        let source = MaildirSource::new(&opts).unwrap();
        let r = crate::ops::backup::run(&mut repo, &source, &opts.run, crate::now(), &NoProgress)
            .unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        Repository::open(store, b"pw").unwrap()
    }

    /// The spans the restore of the messages of `folders` (all: empty) reads, each
    /// once. Also the number of tree blobs the restore reads (the account's tree and
    /// its folders' chunks, two blobs each).
    fn planned(repo: &Repository, folders: &[&str]) -> (usize, Vec<Vec<Id>>, usize) {
        let snap = repo.find_snapshot("latest").unwrap();
        let root: RootTree = repo.read_tree(&snap.root).unwrap();
        let (mut contents, mut files) = (Vec::new(), Vec::new());
        let mut trees = 0;
        for acc in &root.accounts {
            let acc: AccountTree = repo.read_tree(&acc.tree).unwrap();
            trees += 1;
            for node in &acc.folders {
                if !folders.is_empty() && !folders.contains(&&node.name[..]) {
                    continue;
                }
                // A large folder keeps its chunks in a tree (where its cut points fall
                // depends on the messages' mtimes): its nodes are read too.
                let chunks = repo.folder_chunks(node).unwrap();
                trees +=
                    2 * chunks.len() + node.chunk_tree.map_or(0, |t| chunk_tree_nodes(repo, &t));
                for c in &chunks {
                    let entries = repo.read_chunk(c).unwrap();
                    contents.extend(entries.into_iter().map(|e| e.content));
                }
                files.extend(node.files.iter().map(|f| f.content.clone()));
            }
        }
        // The folder files are read from the same spans.
        let all: Vec<Vec<Id>> = contents.iter().chain(&files).cloned().collect();
        let plan = PackPlan::new(repo.index(), &all, |c| c, &SpanOptions::default());
        (plan.spans.len(), contents, trees)
    }

    /// The nodes of the chunk tree below `root`, itself included.
    fn chunk_tree_nodes(repo: &Repository, root: &Id) -> usize {
        let node: crate::repo::tree::ChunkTree = repo.read_tree(root).unwrap();
        1 + node
            .children
            .iter()
            .map(|c| chunk_tree_nodes(repo, c))
            .sum::<usize>()
    }

    /// No byte of a pack was read twice.
    fn read_once(reads: &[(String, u64, u64)]) {
        let mut r = reads.to_vec();
        r.sort();
        for w in r.windows(2) {
            assert!(
                w[0].0 != w[1].0 || w[0].1 + w[0].2 <= w[1].1,
                "read twice: {:?} and {:?}",
                w[0],
                w[1]
            );
        }
    }

    fn restore_to(repo: &Repository, target: &Path, folders: &[&str]) -> RestoreReport {
        let opts = RestoreOptions {
            select: Selection {
                snapshot: "latest".into(),
                folders: folders.iter().map(|f| f.to_string()).collect(),
                ..Default::default()
            },
            target: target.to_path_buf(),
            jobs: 2,
            ..Default::default()
        };
        restore(repo, &opts, &NoProgress).unwrap()
    }

    /// A restore of 300 messages reads each pack span once: as many data reads as
    /// the plan has spans (one per pack here, packs being small), far fewer than
    /// messages, and byte-exact. Before, every blob was its own read.
    #[test]
    fn a_restore_reads_spans_not_blobs() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        maildir(&src, 100);
        let recording = recording(Arc::new(MemoryStore::new()));
        let metered = Arc::new(Metered::new(recording.clone()));
        let repo = backed_up(metered.clone(), &src);
        let (spans, contents, trees) = planned(&repo, &[]);
        let blobs: usize = contents.iter().map(Vec::len).sum();
        let packs = repo.index().packs().len();
        assert!(spans <= packs, "{spans} spans, {packs} packs");
        assert!(blobs >= 300, "{blobs} blobs");
        recording.reads().clear();
        let before = metered.counts();
        let out = t.path().join("out");
        let r = restore_to(&repo, &out, &[]);
        let gets = metered.counts().get - before.get;
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.items_restored, 300);
        assert_eq!(messages(&out), messages(&src), "byte-exact");
        let data_reads = recording.reads().len();
        assert_eq!(data_reads, spans, "one read per planned span");
        read_once(&recording.reads());
        // Besides: the snapshot file, the root tree, the account's trees.
        assert_eq!(gets, (spans + 2 + trees) as u64, "{trees} tree blobs");
        assert!(gets * 5 < 300, "{gets} GETs for 300 messages");
    }

    /// The readers stay within the window: while group `g` is written, no span of a
    /// group past `g + ahead` has been read; every blob opens from the spans as a
    /// single read opens it, and nothing is read twice.
    #[test]
    fn span_reads_stay_within_the_window() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        maildir(&src, 100);
        let recording = recording(Arc::new(MemoryStore::new()));
        let repo = backed_up(recording.clone(), &src);
        let (_, contents, _) = planned(&repo, &[]);
        let opts = SpanOptions {
            group_bytes: 100 << 10,
            readers: 4,
            ahead: 1,
            ..Default::default()
        };
        let groups = plan(repo.index(), &contents, |c| c, |_| true, &opts);
        assert!(groups.len() >= 5, "{} groups", groups.len());
        // Spans in groups 0..=g, for each g.
        let upto: Vec<usize> = (groups.iter())
            .scan(0, |n, g| {
                *n += g.spans.len();
                Some(*n)
            })
            .collect();
        // Single reads to compare with, not recorded.
        let plain = Repository::open(recording.inner(), b"pw").unwrap();
        recording.reads().clear();
        let mut g = 0;
        let mut written = 0;
        read_by_spans(
            &repo,
            &contents,
            |c| c,
            |_| true,
            &opts,
            |jobs, fetched| {
                let reads = recording.reads().len();
                let limit = upto[(g + opts.ahead).min(groups.len() - 1)];
                assert!(
                    reads <= limit,
                    "group {g}: {reads} spans read, {limit} allowed"
                );
                assert!(reads >= upto[g], "group {g} handed over before its spans");
                for id in jobs.iter().flatten() {
                    assert_eq!(fetched.blob(id).unwrap(), plain.read_blob(id).unwrap());
                }
                written += jobs.len();
                g += 1;
            },
        );
        assert_eq!((g, written), (groups.len(), contents.len()));
        assert_eq!(recording.reads().len(), upto[groups.len() - 1]);
    }

    /// A blob that several groups need (a message in two folders) is read by the
    /// first and kept for the others, and opens from there as a single read opens
    /// it. Without keeping, each group reads it again.
    #[test]
    fn shared_blobs_are_read_once() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        maildir(&src, 100);
        let recording = recording(Arc::new(MemoryStore::new()));
        let repo = backed_up(recording.clone(), &src);
        // In folder order: the copies in Archive come far from their originals.
        let (_, contents, _) = planned(&repo, &[]);
        let mut uses: HashMap<Id, usize> = HashMap::new();
        for id in contents.iter().flatten() {
            *uses.entry(*id).or_default() += 1;
        }
        assert_eq!(uses.values().filter(|&&n| n > 1).count(), 10, "ten copies");
        let opts = |keep_bytes| SpanOptions {
            group_bytes: 100 << 10,
            keep_bytes,
            ..Default::default()
        };
        let read_by = |keep_bytes| {
            let groups = plan(repo.index(), &contents, |c| c, |_| true, &opts(keep_bytes));
            assert!(groups.len() >= 5, "{} groups", groups.len());
            let mut n: HashMap<Id, usize> = HashMap::new();
            for id in uses.keys() {
                n.insert(*id, groups.iter().filter(|g| g.reads(id)).count());
            }
            (n, groups.iter().map(|g| g.spans.len()).sum::<usize>())
        };
        let (once, spans) = read_by(64 << 20);
        assert!(
            once.values().all(|&n| n == 1),
            "every blob read by one group"
        );
        let (again, _) = read_by(0);
        let twice = (again.iter()).filter(|(id, n)| uses[*id] > 1 && **n > 1);
        assert_eq!(twice.count(), 10, "without keeping, copies are read again");
        // And read so: the kept blobs open as single reads do.
        let plain = Repository::open(recording.inner(), b"pw").unwrap();
        recording.reads().clear();
        read_by_spans(
            &repo,
            &contents,
            |c| c,
            |_| true,
            &opts(64 << 20),
            |jobs, f| {
                for id in jobs.iter().flatten() {
                    assert_eq!(f.blob(id).unwrap(), plain.read_blob(id).unwrap());
                }
            },
        );
        assert_eq!(recording.reads().len(), spans);
    }

    /// Reading by packs: every span is read once whatever the order of the jobs,
    /// each job is delivered once, after the last span holding its blobs, and every
    /// blob opens as a single read opens it, whether its job got it from the span
    /// being delivered or from the spool (in memory, or on disk past the budget).
    #[test]
    fn packs_are_read_once_in_any_job_order() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        // 150 deliveries of 50 messages: three copies of each body, each with its own
        // trace prefix (two blobs a message; the body's blob shared by three).
        for sub in ["cur", "new", "tmp"] {
            fs::create_dir_all(src.join(sub)).unwrap();
        }
        for i in 0..150u64 {
            let mut m = format!(
                "Received: from h{i} by mx; Tue, 1 Sep 2020 00:00:00 +0000\n\
                     From: a@example.org\nSubject: {}\n\n",
                i % 50
            )
            .into_bytes();
            m.extend(body(i % 50, 3000));
            let name = format!("{}.M{i}.host:2,S", 1_600_000_000 + i);
            fs::write(src.join("cur").join(name), m).unwrap();
        }
        let recording = recording(Arc::new(MemoryStore::new()));
        let repo = backed_up(recording.clone(), &src);
        let (_, mut contents, _) = planned(&repo, &[]);
        assert!(contents.iter().all(|c| c.len() == 2), "prefix and body");
        // Far from pack order: reversed, then every other one first.
        contents.reverse();
        let (even, odd): (Vec<_>, Vec<_>) = contents
            .into_iter()
            .enumerate()
            .partition(|(i, _)| i % 2 == 0);
        let contents: Vec<Vec<Id>> = even.into_iter().chain(odd).map(|(_, c)| c).collect();
        let plain = Repository::open(recording.inner(), b"pw").unwrap();
        // One blob per span (no merging): every two-blob message needs two spans.
        for keep_bytes in [64 << 20, 0] {
            let opts = SpanOptions {
                gap: 0,
                max_span: 1,
                keep_bytes,
                readers: 3,
                ahead: 1,
                ..Default::default()
            };
            let plan = PackPlan::new(repo.index(), &contents, |c| c, &opts);
            let split = contents.iter().filter(|c| {
                let spans: std::collections::HashSet<_> = c
                    .iter()
                    .map(|id| repo.index().get(id).unwrap().offset)
                    .collect();
                spans.len() > 1
            });
            assert_eq!(split.count(), 150, "every message over two spans");
            recording.reads().clear();
            let delivered: Vec<AtomicU64> =
                (0..contents.len()).map(|_| AtomicU64::new(0)).collect();
            let pos = |c: &Vec<Id>| (contents.iter()).position(|x| std::ptr::eq(x, c)).unwrap();
            read_by_packs(
                &repo,
                &contents,
                |c| c,
                &opts,
                |c, blobs| {
                    delivered[pos(c)].fetch_add(1, Relaxed);
                    for id in c {
                        assert_eq!(blobs.blob(id).unwrap(), plain.read_blob(id).unwrap());
                    }
                },
            );
            assert!(
                delivered.iter().all(|n| n.load(Relaxed) == 1),
                "each job once"
            );
            let reads = recording.reads().clone();
            assert_eq!(reads.len(), plan.spans.len(), "keep_bytes {keep_bytes}");
            read_once(&reads);
        }
    }

    /// Issue 26: a restore into a Maildir holds a window of messages at a time, not its
    /// selection. Three folders of 400 messages (one account, one batch), backed up on
    /// two threads (their packs interleave folders and runs of keys), restored in windows
    /// of 300: at most a window and the rest of one chunk are held while the snapshot is
    /// read, a window and a block of each of the four runs while they are merged (the
    /// whole plan held all 1,200 at once); the restore is byte-exact, and the packs are
    /// still read about once (windows in key order read them three times over).
    #[test]
    fn a_maildir_restore_holds_a_window_of_messages() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        maildir(&src, 400);
        let recording = recording(Arc::new(MemoryStore::new()));
        let repo = backed_up(recording.clone(), &src);
        let (spans, contents, _) = planned(&repo, &[]);
        assert_eq!(contents.len(), 1200);
        let whole: u64 = {
            let plan = PackPlan::new(repo.index(), &contents, |c| c, &SpanOptions::default());
            plan.bytes()
        };
        recording.reads().clear();
        let out = t.path().join("out");
        let names = crate::repo::tree::OwnerNames::default();
        let target =
            crate::dest::maildir::MaildirTarget::open(&out, Default::default(), &names, 2).unwrap();
        let mut ctx = Ctx::new(&repo, &target, (0, 0), &NoProgress);
        ctx.window = 300;
        let sel = Selection {
            snapshot: "latest".into(),
            ..Default::default()
        };
        let snap = repo.find_snapshot(&sel.snapshot).unwrap();
        let root: RootTree = repo.read_tree(&snap.root).unwrap();
        let folders = restore_accounts(&ctx, &sel, &root.accounts).unwrap();
        let r = ctx.report(String::new(), 1, folders, std::time::Instant::now());
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!((r.items_total, r.items_restored), (1200, 1200));
        assert_eq!(messages(&out), messages(&src), "byte-exact");
        let held = ctx.n.most_held.load(Relaxed);
        let most = 300 + crate::repo::tree::CHUNK_MAX_ENTRIES.max(4 * super::super::window::BLOCK);
        assert!(
            held <= most,
            "{held} messages held at once, more than {most}"
        );
        let reads = recording.reads();
        let read: u64 = reads.iter().map(|r| r.2).sum();
        assert!(
            read <= whole + whole / 4,
            "{read} bytes read in windows, {whole} at once ({} reads, {spans} spans)",
            reads.len()
        );
    }

    /// Accounts are restored together: a pack span that holds several accounts'
    /// messages is read once, not once per account.
    #[test]
    fn accounts_share_their_span_reads() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        let users = ["ann", "bob", "cid", "dan"];
        for (i, user) in users.iter().enumerate() {
            let dir = src.join("example.org").join(user).join("Maildir");
            maildir_from(&dir, 25, 1000 * i as u64);
        }
        let recording = recording(Arc::new(MemoryStore::new()));
        let repo = backed_up_accounts(recording.clone(), &src, vec![]);
        let (spans, contents, _) = planned(&repo, &[]);
        assert_eq!(contents.len(), 300);
        recording.reads().clear();
        let out = t.path().join("out");
        let r = restore_to(&repo, &out, &[]);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!((r.accounts, r.items_restored), (4, 300));
        for user in users {
            let rel = Path::new("example.org").join(user).join("Maildir");
            assert_eq!(
                messages(&out.join(&rel)),
                messages(&src.join(&rel)),
                "{user}"
            );
        }
        let reads = recording.reads().len();
        assert_eq!(reads, spans, "one read per planned span, for all accounts");
        read_once(&recording.reads());
    }

    /// A target that takes its messages in order (IMAP, mbox), declaring 4 accounts at
    /// once, gets several accounts at once. Regression: the pipeline once gave such
    /// targets batches of one account each, which ran the accounts one after the other
    /// and halved the IMAP restore (bench/imap_restore.py small: 1,943 -> 890 msgs/s).
    #[test]
    fn an_in_order_target_gets_its_accounts_at_once() {
        use crate::dest::{AccountInfo, Caps, FolderInfo, Item, Message, RestoreFailures};
        use crate::dest::{Order, Outcome, Target};
        use std::sync::atomic::AtomicUsize;

        #[derive(Default)]
        struct Counting {
            open: AtomicUsize,
            most: AtomicUsize,
            written: AtomicUsize,
        }
        impl Target for Counting {
            type Account = ();
            type Folder = ();
            fn caps(&self) -> Caps {
                Caps {
                    order: Order::Folder,
                    jobs: 0,
                    open_folders: usize::MAX,
                    accounts: 4,
                    lanes: 1,
                    batch_messages: 10,
                    batch_bytes: 1 << 20,
                    lane_messages: 0,
                    folder_files: false,
                    home: false,
                    store: false,
                    keywords: false,
                    hard_links: false,
                    parts: false,
                }
            }
            fn open_account(&self, _: &AccountInfo) -> crate::Result<()> {
                let now = self.open.fetch_add(1, Relaxed) + 1;
                self.most.fetch_max(now, Relaxed);
                Ok(())
            }
            fn open_folder(&self, _: &(), _: &FolderInfo) -> crate::Result<()> {
                Ok(())
            }
            fn write(&self, _: &(), _: &Message) -> crate::Result<Outcome> {
                // A server's round trip: the accounts overlap if they run together.
                std::thread::sleep(std::time::Duration::from_millis(2));
                self.written.fetch_add(1, Relaxed);
                Ok(Outcome::Written { bytes: 0 })
            }
            fn finish_account(&self, _: (), _: &RestoreFailures) {
                self.open.fetch_sub(1, Relaxed);
            }
            fn item(&self, _: &(), _: Item) -> String {
                String::new()
            }
        }

        let t = tempfile::tempdir().unwrap();
        let (repo, sel) = accounts_of_15(t.path(), &["ann", "bob", "cid", "dan", "eve", "fay"]);
        let (r, target) =
            restore_into(&repo, &sel, &NoProgress, |_| Ok(Counting::default())).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(target.written.load(Relaxed), 6 * 15);
        let most = target.most.load(Relaxed);
        assert!(
            most >= 2,
            "accounts open at once: {most} (the target asked for 4)"
        );
    }

    /// A target whose filesystem is full (or over quota, or read-only) is given up on at
    /// its first such failure: that failure is listed once and every message left is
    /// counted as not tried, not written and listed one by one (a CI run once printed and
    /// held a failure for each of 500,000 messages). Any other failure costs only its
    /// message: the rest is still written.
    #[test]
    fn a_full_target_is_given_up_on_its_first_failure() {
        use crate::dest::{AccountInfo, Caps, FolderInfo, Item, Message, RestoreFailures};
        use crate::dest::{Outcome, Target};
        use std::io::ErrorKind;
        use std::sync::atomic::AtomicUsize;

        struct FailingAt {
            at: usize,
            kind: ErrorKind,
            writes: AtomicUsize,
        }
        impl Target for FailingAt {
            type Account = ();
            type Folder = ();
            fn caps(&self) -> Caps {
                NO_CAPS
            }
            fn open_account(&self, _: &AccountInfo) -> crate::Result<()> {
                Ok(())
            }
            fn open_folder(&self, _: &(), _: &FolderInfo) -> crate::Result<()> {
                Ok(())
            }
            fn write(&self, _: &(), _: &Message) -> crate::Result<Outcome> {
                match self.writes.fetch_add(1, Relaxed) + 1 {
                    n if n == self.at => Err(crate::Error::io("m", self.kind.into())),
                    _ => Ok(Outcome::Written { bytes: 0 }),
                }
            }
            fn finish_account(&self, _: (), _: &RestoreFailures) {}
            fn item(&self, _: &(), _: Item) -> String {
                String::new()
            }
        }

        let t = tempfile::tempdir().unwrap();
        let (repo, sel) = accounts_of_15(t.path(), &["ann", "bob", "cid"]);
        for kind in [ErrorKind::StorageFull, ErrorKind::QuotaExceeded] {
            let target = |_: Opening<'_>| {
                let writes = AtomicUsize::new(0);
                Ok(FailingAt {
                    at: 5,
                    kind,
                    writes,
                })
            };
            let (r, target) = restore_into(&repo, &sel, &NoProgress, target).unwrap();
            assert_eq!(target.writes.load(Relaxed), 5, "{kind:?}");
            assert_eq!(r.failures.len(), 1, "{kind:?}: {:?}", r.failures);
            assert_eq!((r.items_restored, r.items_failed), (4, 41), "{kind:?}");
            assert_eq!(r.items_not_tried, 40, "{kind:?}");
        }
        let target = |_: Opening<'_>| {
            let (kind, writes) = (ErrorKind::PermissionDenied, AtomicUsize::new(0));
            Ok(FailingAt {
                at: 5,
                kind,
                writes,
            })
        };
        let (r, target) = restore_into(&repo, &sel, &NoProgress, target).unwrap();
        assert_eq!(target.writes.load(Relaxed), 45);
        assert_eq!(
            (r.items_restored, r.items_failed, r.items_not_tried),
            (44, 1, 0)
        );
    }

    /// A restore the caller cancels ([`Progress::cancelled`], the web UI's cancel button)
    /// writes nothing more, in either order, lists no failure for it, and counts what
    /// was left as not tried, so the counts still add up.
    #[test]
    fn a_cancelled_restore_writes_nothing_more_and_counts_the_rest() {
        use crate::dest::{AccountInfo, Caps, FolderInfo, Item, Message, RestoreFailures};
        use crate::dest::{Order, Outcome, Target};
        use crate::report::Progress;
        use std::sync::atomic::AtomicUsize;

        struct Counting {
            order: Order,
            writes: AtomicUsize,
        }
        impl Target for Counting {
            type Account = ();
            type Folder = ();
            fn caps(&self) -> Caps {
                Caps {
                    order: self.order,
                    ..NO_CAPS
                }
            }
            fn open_account(&self, _: &AccountInfo) -> crate::Result<()> {
                Ok(())
            }
            fn open_folder(&self, _: &(), _: &FolderInfo) -> crate::Result<()> {
                Ok(())
            }
            fn write(&self, _: &(), _: &Message) -> crate::Result<Outcome> {
                self.writes.fetch_add(1, Relaxed);
                Ok(Outcome::Written { bytes: 0 })
            }
            fn finish_account(&self, _: (), _: &RestoreFailures) {}
            fn item(&self, _: &(), _: Item) -> String {
                String::new()
            }
        }
        /// Cancels once `after` messages are done.
        struct CancelAfter {
            after: u64,
            done: AtomicU64,
        }
        impl Progress for CancelAfter {
            fn advance(&self, items: u64, _: u64) {
                self.done.fetch_add(items, Relaxed);
            }
            fn cancelled(&self) -> bool {
                self.done.load(Relaxed) >= self.after
            }
        }

        let t = tempfile::tempdir().unwrap();
        let (repo, sel) = accounts_of_15(t.path(), &["ann", "bob", "cid"]);
        for order in [Order::Any, Order::Folder] {
            let target = |_: Opening<'_>| {
                let writes = AtomicUsize::new(0);
                Ok(Counting { order, writes })
            };
            let progress = CancelAfter {
                after: 7,
                done: AtomicU64::new(0),
            };
            let (r, target) = restore_into(&repo, &sel, &progress, target).unwrap();
            let writes = target.writes.load(Relaxed) as u64;
            assert!(r.cancelled, "{order:?}");
            assert!(
                writes < 15,
                "{order:?}: {writes} written after a cancel at 7"
            );
            assert_eq!(r.items_restored, writes, "{order:?}");
            assert_eq!(r.items_not_tried, 45 - writes, "{order:?}");
            assert_eq!(r.items_failed, r.items_not_tried, "{order:?}");
            assert!(r.failures.is_empty(), "{order:?}: {:?}", r.failures);
        }
        let (r, _) = restore_into(&repo, &sel, &NoProgress, |_: Opening<'_>| {
            let writes = AtomicUsize::new(0);
            Ok(Counting {
                order: Order::Any,
                writes,
            })
        })
        .unwrap();
        assert!(!r.cancelled);
        assert_eq!((r.items_restored, r.items_not_tried), (45, 0));
    }

    /// An in-order target opens the next account (for IMAP a login and its folders
    /// made) while the one before writes, not after it: opening overlaps the data.
    #[test]
    fn an_in_order_target_opens_the_next_account_while_one_writes() {
        use crate::dest::{AccountInfo, Caps, FolderInfo, Item, Message, RestoreFailures};
        use crate::dest::{Order, Outcome, Target};
        use std::sync::atomic::{AtomicBool, AtomicUsize};
        use std::time::{Duration, Instant};

        #[derive(Default)]
        struct Overlapping {
            opened: AtomicUsize,
            checked: AtomicBool,
            overlapped: AtomicBool,
            written: AtomicUsize,
        }
        impl Target for Overlapping {
            /// The order in which the account was opened.
            type Account = usize;
            type Folder = usize;
            fn caps(&self) -> Caps {
                Caps {
                    order: Order::Folder,
                    jobs: 0,
                    open_folders: usize::MAX,
                    accounts: 1,
                    lanes: 1,
                    batch_messages: 10,
                    batch_bytes: 1 << 20,
                    lane_messages: 0,
                    folder_files: false,
                    home: false,
                    store: false,
                    keywords: false,
                    hard_links: false,
                    parts: false,
                }
            }
            fn open_account(&self, _: &AccountInfo) -> crate::Result<usize> {
                Ok(self.opened.fetch_add(1, Relaxed))
            }
            fn open_folder(&self, acc: &usize, _: &FolderInfo) -> crate::Result<usize> {
                Ok(*acc)
            }
            fn write(&self, acc: &usize, _: &Message) -> crate::Result<Outcome> {
                // The first write of the first account waits (a while at most) for the
                // second account to be opened.
                if *acc == 0 && !self.checked.swap(true, Relaxed) {
                    let t = Instant::now();
                    while self.opened.load(Relaxed) < 2 && t.elapsed() < Duration::from_secs(2) {
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    (self.overlapped).store(self.opened.load(Relaxed) >= 2, Relaxed);
                }
                self.written.fetch_add(1, Relaxed);
                Ok(Outcome::Written { bytes: 0 })
            }
            fn finish_account(&self, _: usize, _: &RestoreFailures) {}
            fn item(&self, _: &usize, _: Item) -> String {
                String::new()
            }
        }

        let t = tempfile::tempdir().unwrap();
        let (repo, sel) = accounts_of_15(t.path(), &["ann", "bob", "cid"]);
        let (r, target) =
            restore_into(&repo, &sel, &NoProgress, |_| Ok(Overlapping::default())).unwrap();
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(target.written.load(Relaxed), 3 * 15);
        assert_eq!(target.opened.load(Relaxed), 3);
        assert!(
            target.overlapped.load(Relaxed),
            "the second account was opened only after the first was written"
        );
    }

    /// An account whose tree cannot be read stops the restore with its error, after
    /// the accounts planned before it (batched, not yet written) are restored.
    #[test]
    fn accounts_before_an_unreadable_one_are_restored() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        for (i, user) in ["ann", "bob"].iter().enumerate() {
            let dir = src.join("example.org").join(user).join("Maildir");
            maildir_from(&dir, 5, 1000 * i as u64);
        }
        let store_dir = t.path().join("repo");
        let repo = backed_up_accounts(Arc::new(LocalStore::new(&store_dir)), &src, vec![]);
        let snap = repo.find_snapshot("latest").unwrap();
        let root: RootTree = repo.read_tree(&snap.root).unwrap();
        assert_eq!(root.accounts[1].name, "bob@example.org");
        let loc = repo.index().get(&root.accounts[1].tree).unwrap();
        let file = store_dir.join(crate::repo::pack::pack_path(
            &repo.index().pack_id(loc.pack),
        ));
        let mut bytes = fs::read(&file).unwrap();
        bytes[(loc.offset + loc.stored_len / 2) as usize] ^= 1;
        let mut perm = fs::metadata(&file).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
        fs::set_permissions(&file, perm).unwrap();
        fs::write(&file, bytes).unwrap();
        let out = t.path().join("out");
        let opts = RestoreOptions {
            select: Selection {
                snapshot: "latest".into(),
                ..Default::default()
            },
            target: out.clone(),
            jobs: 2,
            ..Default::default()
        };
        let err = restore(&repo, &opts, &NoProgress).unwrap_err();
        assert!(
            err.to_string().contains(&root.accounts[1].tree.short()),
            "{err}"
        );
        let ann = Path::new("example.org/ann/Maildir");
        assert_eq!(
            messages(&out.join(ann)).len(),
            15 + 3,
            "ann's messages (and folder files) restored"
        );
        assert!(
            messages(&out.join(ann)) == messages(&src.join(ann)),
            "byte-exact"
        );
    }

    /// A restore of one folder reads only spans that hold its blobs, as many as its
    /// plan has.
    #[test]
    fn a_partial_restore_reads_only_its_spans() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        maildir(&src, 100);
        let recording = recording(Arc::new(MemoryStore::new()));
        let repo = backed_up(recording.clone(), &src);
        let (spans, contents, _) = planned(&repo, &["Sent"]);
        recording.reads().clear();
        let out = t.path().join("out");
        let r = restore_to(&repo, &out, &["Sent"]);
        assert!(r.failures.is_empty(), "{:?}", r.failures);
        assert_eq!(r.items_restored, 100);
        let want: BTreeMap<_, _> = messages(&src)
            .into_iter()
            .filter(|(p, _)| p.starts_with(".Sent"))
            .collect();
        assert_eq!(messages(&out), want, "byte-exact, and nothing else");
        let reads = recording.reads().clone();
        assert_eq!(reads.len(), spans, "one read per planned span");
        assert!(
            reads.len() * 5 < 100,
            "{} reads for 100 messages",
            reads.len()
        );
        // Sent's folder files are read from the spans too; one may lie in a span of
        // its own, depending on where the backup's threads put it.
        let snap = repo.find_snapshot("latest").unwrap();
        let root: RootTree = repo.read_tree(&snap.root).unwrap();
        let mut files = Vec::new();
        for acc in &root.accounts {
            let acc: AccountTree = repo.read_tree(&acc.tree).unwrap();
            let sent = acc.folders.iter().filter(|n| n.name == "Sent");
            files.extend(sent.flat_map(|n| n.files.iter().map(|f| f.content.clone())));
        }
        let index = repo.index();
        for (path, offset, len) in &reads {
            let holds = contents.iter().chain(&files).flatten().any(|id| {
                let l = index.get(id).unwrap();
                crate::repo::pack::pack_path(&index.pack_id(l.pack)) == *path
                    && u64::from(l.offset) >= *offset
                    && u64::from(l.offset) + u64::from(l.stored_len) <= offset + len
            });
            assert!(holds, "{path} {offset}+{len} holds none of Sent's blobs");
        }
    }

    /// A damaged blob read in a span fails its message only, named with the blob and
    /// its pack; every other message is restored.
    #[test]
    fn a_damaged_blob_in_a_span_is_named() {
        let t = tempfile::tempdir().unwrap();
        let src = t.path().join("src");
        maildir(&src, 30);
        let store_dir = t.path().join("repo");
        let repo = backed_up(Arc::new(LocalStore::new(&store_dir)), &src);
        // The first blob of one message of Sent: flip a byte in its middle.
        let snap = repo.find_snapshot("latest").unwrap();
        let root: RootTree = repo.read_tree(&snap.root).unwrap();
        let acc: AccountTree = repo.read_tree(&root.accounts[0].tree).unwrap();
        let sent = acc.folders.iter().find(|f| f.name == "Sent").unwrap();
        let entry = repo.read_chunk(&sent.chunks[0]).unwrap().remove(7);
        let id = entry.content[0];
        let loc = repo.index().get(&id).unwrap();
        let pack = crate::repo::pack::pack_path(&repo.index().pack_id(loc.pack));
        let file = store_dir.join(&pack);
        let mut bytes = fs::read(&file).unwrap();
        bytes[(loc.offset + loc.stored_len / 2) as usize] ^= 1;
        let mut perm = fs::metadata(&file).unwrap().permissions();
        std::os::unix::fs::PermissionsExt::set_mode(&mut perm, 0o600);
        fs::set_permissions(&file, perm).unwrap();
        fs::write(&file, bytes).unwrap();
        let out = t.path().join("out");
        let r = restore_to(&repo, &out, &[]);
        assert_eq!(
            (r.items_restored, r.items_failed),
            (89, 1),
            "{:?}",
            r.failures
        );
        let name = String::from_utf8_lossy(&entry.name).to_string();
        let f = &r.failures[0];
        assert!(f.item.contains(&name), "{f:?}");
        assert!(f.error.contains(&id.short()), "{f:?}");
        assert!(f.error.contains(&pack), "{f:?}");
        let mut want = messages(&src);
        want.retain(|p, _| !p.ends_with(&name));
        assert_eq!(messages(&out), want);
    }
}
