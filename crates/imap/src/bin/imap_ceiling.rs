//! imap-ceiling: the IMAP server's own ceiling for a restore.
//!
//! Pre-reads every message of a Maildir tree (or generates messages) into
//! memory, converts them to CRLF, then loads them into an IMAP server with
//! MULTIAPPEND + LITERAL+ over N connections and prints messages/s. Nothing
//! but the server and the wire is measured: no repository, no decryption.
//!
//! ```text
//! imap-ceiling [--maildir ROOT | --generate N] [--url imap://HOST:PORT]
//!              [--password P] [--master USER] [--connections 4] [--batch 500]
//!              [--batch-bytes 8388608] [--accounts K] [--strategy auto|multi|pipelined|sync]
//! ```
//! Without `--url` it starts its own Dovecot (the test harness) and stops it
//! afterwards; `--temp-dir /dev/shm` puts its mail on tmpfs. `ROOT` is `ROOT/<domain>/<user>/Maildir` (Dovecot's layout) or
//! a single Maildir.

use std::collections::VecDeque;
use std::error::Error as StdError;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, UNIX_EPOCH};

use mailvault_imap::maildir_flags::{maildir_to_imap, KeywordTable};
use mailvault_imap::proto::mutf7;
use mailvault_imap::testing::{DovecotOptions, DovecotServer};
use mailvault_imap::{
    to_crlf, AppendMsg, AppendStrategy, Client, ClientOptions, Credentials, Endpoint, InternalDate,
};

type BoxError = Box<dyn StdError + Send + Sync>;

/// A batch: folder index, message range.
type Job = (usize, usize, usize);

const USAGE: &str = "usage: imap-ceiling [--maildir ROOT | --generate N] [--url imap://HOST:PORT] \
[--password P] [--master USER] [--connections 4] [--batch 500] [--batch-bytes 8388608] [--accounts K] \
[--strategy auto|multi|pipelined|sync] [--insecure] [--temp-dir DIR]";

/// Command-line settings.
struct Args {
    maildir: Option<PathBuf>,
    generate: usize,
    url: Option<String>,
    password: String,
    master: Option<String>,
    connections: usize,
    batch: usize,
    /// A batch also ends before it would pass this many bytes (mailvault's default too):
    /// Dovecot spends markedly more CPU per message on MULTIAPPENDs of tens of MB.
    batch_bytes: usize,
    accounts: usize,
    strategy: AppendStrategy,
    insecure: bool,
    temp_dir: Option<PathBuf>,
}

fn parse_args() -> Result<Args, BoxError> {
    let mut a = Args {
        maildir: None,
        generate: 5000,
        url: None,
        password: mailvault_imap::testing::USER_PASSWORD.into(),
        master: None,
        connections: 4,
        batch: 500,
        batch_bytes: 8 << 20,
        accounts: 0,
        strategy: AppendStrategy::Auto,
        insecure: false,
        temp_dir: None,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || {
            it.next()
                .ok_or_else(|| format!("{flag} needs a value\n{USAGE}"))
        };
        match flag.as_str() {
            "--maildir" => a.maildir = Some(PathBuf::from(value()?)),
            "--generate" => a.generate = value()?.parse()?,
            "--url" => a.url = Some(value()?),
            "--password" => a.password = value()?,
            "--master" => a.master = Some(value()?),
            "--connections" => a.connections = value()?.parse::<usize>()?.max(1),
            "--batch" => a.batch = value()?.parse::<usize>()?.max(1),
            "--batch-bytes" => a.batch_bytes = value()?.parse::<usize>()?.max(1),
            "--accounts" => a.accounts = value()?.parse()?,
            "--strategy" => {
                a.strategy = match value()?.as_str() {
                    "auto" => AppendStrategy::Auto,
                    "multi" => AppendStrategy::MultiAppend,
                    "pipelined" => AppendStrategy::Pipelined,
                    "sync" => AppendStrategy::Synchronous,
                    other => return Err(format!("unknown strategy {other}\n{USAGE}").into()),
                }
            }
            "--insecure" => a.insecure = true,
            "--temp-dir" => a.temp_dir = Some(PathBuf::from(value()?)),
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}\n{USAGE}").into()),
        }
    }
    if a.accounts == 0 {
        a.accounts = a.connections;
    }
    Ok(a)
}

/// One message, pre-read and ready for the wire.
struct Msg {
    flags: Vec<String>,
    date: Option<InternalDate>,
    data: Vec<u8>,
}

/// Messages of one folder of one account.
struct Folder {
    account: String,
    folder: String,
    msgs: Vec<Msg>,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("imap-ceiling: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), BoxError> {
    let args = parse_args()?;
    let t0 = Instant::now();
    let folders = match &args.maildir {
        Some(root) => read_tree(root)?,
        None => generate(args.generate, args.accounts),
    };
    let count: usize = folders.iter().map(|f| f.msgs.len()).sum();
    let bytes: usize = folders
        .iter()
        .flat_map(|f| &f.msgs)
        .map(|m| m.data.len())
        .sum();
    println!(
        "pre-read {count} messages, {:.1} MB, {} folders in {:.2?}",
        bytes as f64 / 1e6,
        folders.len(),
        t0.elapsed()
    );

    let server = match &args.url {
        Some(_) => None,
        None => {
            let s = DovecotServer::start_with(&DovecotOptions {
                temp_parent: args.temp_dir.clone(),
                ..DovecotOptions::default()
            })?;
            println!("started {} on port {}", s.version(), s.port());
            Some(s)
        }
    };
    let mut opts = match (&args.url, &server) {
        (Some(url), _) => ClientOptions::new(Endpoint::parse(url)?),
        (None, Some(s)) => s.client_options(),
        (None, None) => return Err("no server".into()),
    };
    opts.append.strategy = args.strategy;
    opts.tls.insecure = args.insecure;
    opts.io_timeout = Duration::from_secs(600);
    let client = Client::new(opts)?;
    let creds = |account: &str| match (&args.master, &server) {
        (Some(m), _) => Credentials::Master {
            user: account.into(),
            master: m.clone(),
            password: args.password.clone(),
        },
        (None, Some(s)) => s.master(account),
        (None, None) => Credentials::User {
            user: account.into(),
            password: args.password.clone(),
        },
    };

    // Provisioning (not timed): folders.
    let t_prov = Instant::now();
    let mut session: Option<(String, mailvault_imap::Session)> = None;
    for f in &folders {
        if session
            .as_ref()
            .map(|(a, _)| a != &f.account)
            .unwrap_or(true)
        {
            if let Some((_, s)) = session.take() {
                s.logout()?;
            }
            session = Some((f.account.clone(), client.login(&creds(&f.account))?));
        }
        if let Some((_, s)) = session.as_mut() {
            if f.folder != "INBOX" {
                s.create(&f.folder, None)?;
            }
        }
    }
    if let Some((_, s)) = session {
        s.logout()?;
    }
    println!(
        "provisioned {} folders in {:.2?}",
        folders.len(),
        t_prov.elapsed()
    );

    // Work: batches of up to --batch messages and --batch-bytes bytes. Whole accounts are dealt to
    // connections (largest first, to the least loaded), so a connection
    // logs in once per account; an idle connection steals from the others.
    // With fewer accounts than connections, connections share accounts.
    let folders = Arc::new(folders);
    let mut by_account: Vec<(String, usize, Vec<Job>)> = Vec::new();
    for (fi, f) in folders.iter().enumerate() {
        let pos = match by_account.iter().position(|(a, _, _)| *a == f.account) {
            Some(p) => p,
            None => {
                by_account.push((f.account.clone(), 0, Vec::new()));
                by_account.len() - 1
            }
        };
        let mut start = 0;
        while start < f.msgs.len() {
            let mut end = start;
            let mut bytes = 0;
            while end < f.msgs.len()
                && end - start < args.batch
                && (end == start || bytes + f.msgs[end].data.len() <= args.batch_bytes)
            {
                bytes += f.msgs[end].data.len();
                end += 1;
            }
            by_account[pos].1 += end - start;
            by_account[pos].2.push((fi, start, end));
            start = end;
        }
    }
    by_account.sort_by_key(|a| std::cmp::Reverse(a.1));
    let mut queues: Vec<(usize, VecDeque<Job>)> = vec![(0, VecDeque::new()); args.connections];
    if by_account.len() >= args.connections {
        for (_, n, jobs) in by_account {
            if let Some(q) = queues.iter_mut().min_by_key(|(load, _)| *load) {
                q.0 += n;
                q.1.extend(jobs);
            }
        }
    } else {
        let all: Vec<_> = by_account.into_iter().flat_map(|(_, _, j)| j).collect();
        for (i, j) in all.into_iter().enumerate() {
            queues[i % args.connections].1.push_back(j);
        }
    }
    let queues: Arc<Vec<Mutex<VecDeque<Job>>>> =
        Arc::new(queues.into_iter().map(|(_, q)| Mutex::new(q)).collect());
    let t = Instant::now();
    let workers: Vec<_> = (0..args.connections)
        .map(|w| {
            let queues = Arc::clone(&queues);
            let folders = Arc::clone(&folders);
            let client = client.clone();
            let creds_for: Vec<(String, Credentials)> = folders
                .iter()
                .map(|f| (f.account.clone(), creds(&f.account)))
                .collect();
            std::thread::spawn(move || -> Result<(usize, usize), String> {
                let mut session: Option<(String, mailvault_imap::Session)> = None;
                let (mut ok, mut refused) = (0, 0);
                loop {
                    let mut job = queues[w].lock().map_err(|e| e.to_string())?.pop_front();
                    for q in queues.iter() {
                        if job.is_some() {
                            break;
                        }
                        job = q.lock().map_err(|e| e.to_string())?.pop_back();
                    }
                    let Some((fi, start, end)) = job else { break };
                    let f = &folders[fi];
                    if session
                        .as_ref()
                        .map(|(a, _)| a != &f.account)
                        .unwrap_or(true)
                    {
                        if let Some((_, s)) = session.take() {
                            s.logout().map_err(|e| e.to_string())?;
                        }
                        let c = creds_for
                            .iter()
                            .find(|(a, _)| *a == f.account)
                            .map(|(_, c)| c.clone())
                            .ok_or("no credentials")?;
                        session = Some((
                            f.account.clone(),
                            client.login(&c).map_err(|e| e.to_string())?,
                        ));
                    }
                    let Some((_, s)) = session.as_mut() else {
                        break;
                    };
                    let batch: Vec<AppendMsg<'_>> = f.msgs[start..end]
                        .iter()
                        .map(|m| AppendMsg {
                            flags: m.flags.clone(),
                            internal_date: m.date,
                            data: &m.data,
                        })
                        .collect();
                    let out = s
                        .append_batch(&f.folder, &batch)
                        .map_err(|e| e.to_string())?;
                    for o in &out {
                        if o.is_appended() {
                            ok += 1;
                        } else {
                            refused += 1;
                            eprintln!("refused in {}/{}: {o:?}", f.account, f.folder);
                        }
                    }
                }
                if let Some((_, s)) = session {
                    s.logout().map_err(|e| e.to_string())?;
                }
                Ok((ok, refused))
            })
        })
        .collect();
    let (mut ok, mut refused) = (0, 0);
    for w in workers {
        let (o, r) = w.join().map_err(|_| "worker panicked")??;
        ok += o;
        refused += r;
    }
    let secs = t.elapsed().as_secs_f64();
    println!(
        "appended {ok} messages ({refused} refused), {:.1} MB over {} connections in {secs:.2} s: {:.0} msgs/s, {:.1} MB/s",
        bytes as f64 / 1e6,
        args.connections,
        ok as f64 / secs,
        bytes as f64 / 1e6 / secs
    );
    Ok(())
}

/// Generates `n` messages spread over `accounts` accounts (INBOX each):
/// sizes mostly 2-8 KB with a tail up to ~100 KB, like a real mailbox.
fn generate(n: usize, accounts: usize) -> Vec<Folder> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state
    };
    let mut folders: Vec<Folder> = (0..accounts.max(1))
        .map(|a| Folder {
            account: format!("user{a}@example.org"),
            folder: "INBOX".into(),
            msgs: Vec::new(),
        })
        .collect();
    for i in 0..n {
        let size = match rnd() % 100 {
            0..=79 => 2_000 + rnd() % 6_000,
            80..=97 => 8_000 + rnd() % 30_000,
            _ => 40_000 + rnd() % 60_000,
        } as usize;
        let mut m = format!(
            "Return-Path: <s{i}@example.net>\nMessage-ID: <gen{i}.{}@example.net>\nFrom: Sender <s{i}@example.net>\nTo: user@example.org\nSubject: generated message {i}\nDate: Mon, 1 Jan 2024 10:00:00 +0000\n\n",
            rnd()
        )
        .into_bytes();
        while m.len() < size {
            let word = rnd() % 9 + 2;
            for _ in 0..word {
                m.push(b'a' + (rnd() % 26) as u8);
            }
            m.push(if rnd() % 12 == 0 { b'\n' } else { b' ' });
        }
        m.push(b'\n');
        let flags = if i % 3 == 0 {
            vec![]
        } else {
            vec!["\\Seen".to_string()]
        };
        let k = i % folders.len();
        folders[k].msgs.push(Msg {
            flags,
            date: Some(InternalDate {
                secs: 1_600_000_000 + i as i64 * 60,
                tz_minutes: 0,
            }),
            data: to_crlf(&m).into_owned(),
        });
    }
    folders
}

/// Reads `ROOT/<domain>/<user>/Maildir` trees, or `ROOT` as one Maildir.
fn read_tree(root: &Path) -> Result<Vec<Folder>, BoxError> {
    let mut maildirs: Vec<(String, PathBuf)> = Vec::new();
    if root.join("cur").is_dir() {
        maildirs.push(("user@example.org".into(), root.to_path_buf()));
    } else {
        for d in fs::read_dir(root)? {
            let d = d?.path();
            if !d.is_dir() {
                continue;
            }
            for u in fs::read_dir(&d)? {
                let u = u?.path();
                let md = u.join("Maildir");
                if md.join("cur").is_dir() {
                    let name = |p: &Path| {
                        p.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default()
                    };
                    maildirs.push((format!("{}@{}", name(&u), name(&d)), md));
                }
            }
        }
    }
    let mut folders = Vec::new();
    for (account, md) in maildirs {
        let mut dirs = vec![("INBOX".to_string(), md.clone())];
        for e in fs::read_dir(&md)? {
            let p = e?.path();
            let n = p
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            if let Some(rest) = n.strip_prefix('.') {
                if p.join("cur").is_dir() && !rest.is_empty() {
                    let decoded =
                        mutf7::decode(rest.as_bytes()).unwrap_or_else(|_| rest.to_string());
                    dirs.push((decoded.replace('.', "/"), p));
                }
            }
        }
        for (folder, dir) in dirs {
            let table = KeywordTable::parse(
                &fs::read_to_string(dir.join("dovecot-keywords")).unwrap_or_default(),
            );
            let mut msgs = Vec::new();
            for sub in ["cur", "new"] {
                let Ok(rd) = fs::read_dir(dir.join(sub)) else {
                    continue;
                };
                for e in rd {
                    let e = e?;
                    let name = e.file_name().to_string_lossy().into_owned();
                    let letters = name.split_once(":2,").map(|(_, l)| l).unwrap_or("");
                    let meta = e.metadata()?;
                    let secs = meta
                        .modified()
                        .ok()
                        .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                        .map(|d| d.as_secs() as i64);
                    msgs.push(Msg {
                        flags: maildir_to_imap(letters, &table).flags,
                        date: secs.map(|secs| InternalDate {
                            secs,
                            tz_minutes: 0,
                        }),
                        data: to_crlf(&fs::read(e.path())?).into_owned(),
                    });
                }
            }
            if !msgs.is_empty() {
                folders.push(Folder {
                    account: account.clone(),
                    folder,
                    msgs,
                });
            }
        }
    }
    Ok(folders)
}
