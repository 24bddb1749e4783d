//! The delivery plan: which messages exist, who sent them to whom, which accounts got a
//! copy, in which folder, with which flags and file name. Planning is sequential and
//! cheap (no message bytes); rendering and writing the planned messages is then done in
//! parallel from each event's own seed.

use std::collections::HashSet;

use rand::Rng as _;

use crate::rng::{chance, log_normal_size, Rng};
use crate::words::{ATTACHMENT_KINDS, ZONES};
use crate::world::World;

/// Who a header address names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Party {
    Account(usize),
    External(usize),
    List(usize),
}

/// Odd-but-valid variants of a message's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Odd {
    None,
    /// CRLF line ends throughout.
    Crlf,
    /// The last line has no line end.
    NoFinalNewline,
    /// Raw UTF-8 in `From:` and `Subject:`.
    EightBit,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// From outside to one or more accounts.
    External,
    /// Through a mailing list (external list server, or a local alias).
    List,
    /// From an account to other accounts of the store (plus the sender's Sent copy).
    Internal,
    /// From an account to outside: only the Sent copy is stored.
    Outgoing,
    /// An unsent draft.
    Draft,
}

#[derive(Debug, Clone)]
pub(crate) struct Attachment {
    /// Seed of the payload bytes and the file name.
    pub seed: u64,
    pub len: usize,
    pub kind: usize,
}

impl Attachment {
    pub(crate) fn mime(&self) -> &'static str {
        ATTACHMENT_KINDS[self.kind].0
    }

    pub(crate) fn file_name(&self) -> String {
        let (_, ext, stem) = ATTACHMENT_KINDS[self.kind];
        format!("{stem}{}.{ext}", self.seed % 9000 + 1000)
    }
}

/// One stored file of an event.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    pub account: usize,
    pub folder: u16,
    /// Delivery time: file name time and mtime.
    pub time: i64,
    /// Maildir unique part of the file name (`<secs>.M<usec>P<pid>.<host>`).
    pub key: String,
    /// Maildir flags, sorted (empty in `new/`).
    pub flags: String,
    /// In `new/`, without `:2,`.
    pub new: bool,
    /// Has per-recipient delivery trace lines (not for Sent and Drafts copies).
    pub trace: bool,
}

/// One message as written by its sender, and the files it became in the store.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    pub seed: u64,
    /// Sending time.
    pub date: i64,
    /// Sender's zone, minutes east of UTC.
    pub tz: i32,
    pub kind: Kind,
    pub from: Party,
    pub to: Vec<Party>,
    pub cc: Vec<Party>,
    pub list: Option<usize>,
    /// The message replied to or forwarded.
    pub parent: Option<usize>,
    pub forward: bool,
    pub subject_seed: u64,
    pub attachments: Vec<Attachment>,
    pub html: bool,
    pub odd: Odd,
    /// Bytes of new body text.
    pub text_len: usize,
    pub deliveries: Vec<Delivery>,
}

impl Event {
    pub(crate) fn copies(&self) -> usize {
        self.deliveries.len().saturating_sub(1)
    }
}

/// How many messages and what they look like.
#[derive(Debug, Clone)]
pub(crate) struct PlanParams {
    pub messages: usize,
    pub shared_ratio: f64,
    pub attachment_ratio: f64,
    pub median_attachment: usize,
    pub max_attachment: usize,
    pub forward_ratio: f64,
    pub html_ratio: f64,
    pub odd_ratio: f64,
    pub start: i64,
    pub end: i64,
    /// New deliveries into a live store (INBOX, mostly unseen), not a history.
    pub mutation: bool,
}

/// The place of a file in its account.
enum Role {
    Received { list: Option<usize>, spam: bool },
    Sent,
    Draft,
}

/// Plans `p.messages` stored files. `used_keys` holds keys already taken in the store.
pub(crate) fn plan(
    w: &World,
    p: &PlanParams,
    rng: &mut Rng,
    used_keys: &mut HashSet<String>,
) -> Vec<Event> {
    let total = p.messages;
    let copies_target = if w.accounts.len() < 2 {
        0
    } else {
        ((total as f64 * p.shared_ratio).round() as usize).min(total.saturating_sub(1))
    };
    let mut events: Vec<Event> = Vec::new();
    let mut pool: Vec<(usize, usize)> = Vec::new(); // (event, attachment) to forward again
    let (mut stored, mut copies) = (0usize, 0usize);
    let (mut avg_extra, mut multi_events) = (2.5f64, 0usize);
    let span = (p.end - p.start) as f64;
    while stored < total {
        let remaining = total - stored;
        let copies_left = copies_target.saturating_sub(copies).min(remaining - 1);
        let originals_left = remaining - copies_left;
        let multi = copies_left > 0
            && (originals_left <= 1
                || rng.gen::<f64>() < copies_left as f64 / avg_extra / originals_left as f64);
        let max_files = if multi { 1 + copies_left } else { 1 };
        let date = p.start + (span * (stored as f64 + rng.gen::<f64>()) / total as f64) as i64;
        let ev = event(w, p, rng, &events, &pool, date, multi, max_files, used_keys);
        let n = ev.deliveries.len();
        if n > 1 {
            multi_events += 1;
            avg_extra += ((n - 1) as f64 - avg_extra) / multi_events.min(200) as f64;
        }
        stored += n;
        copies += n - 1;
        for a in 0..ev.attachments.len() {
            pool.push((events.len(), a));
        }
        events.push(ev);
    }
    events
}

#[allow(clippy::too_many_arguments)]
fn event(
    w: &World,
    p: &PlanParams,
    rng: &mut Rng,
    events: &[Event],
    pool: &[(usize, usize)],
    date: i64,
    multi: bool,
    max_files: usize,
    used_keys: &mut HashSet<String>,
) -> Event {
    let seed: u64 = rng.gen();
    let sender_with = |rng: &mut Rng, has: &dyn Fn(usize) -> bool| -> Option<usize> {
        let picked = w.weights.pick_distinct(rng, 1, has);
        picked.first().copied()
    };
    let mut ev = Event {
        seed,
        date,
        tz: ZONES[rng.gen_range(0..ZONES.len())],
        kind: Kind::External,
        from: Party::External(rng.gen_range(0..w.externals.len())),
        to: Vec::new(),
        cc: Vec::new(),
        list: None,
        parent: None,
        forward: false,
        subject_seed: rng.gen(),
        attachments: Vec::new(),
        html: false,
        odd: Odd::None,
        text_len: log_normal_size(rng, 1800.0, 0.9, 120, 40_000),
        deliveries: Vec::new(),
    };
    // (account, role) of each file, in order.
    let mut files: Vec<(usize, Role)> = Vec::new();
    let r: f64 = rng.gen();
    let usable_lists: Vec<usize> = (0..w.lists.len())
        .filter(|&l| w.lists[l].members.len() >= 2)
        .collect();
    let has_sent = |a: usize| w.accounts[a].sent.is_some();
    if multi && r < 0.45 && !usable_lists.is_empty() {
        let l = usable_lists[rng.gen_range(0..usable_lists.len())];
        let list = &w.lists[l];
        ev.kind = Kind::List;
        ev.list = Some(l);
        ev.to = vec![Party::List(l)];
        let mut members = list.members.clone();
        if list.internal {
            let poster = members[rng.gen_range(0..members.len())];
            ev.from = Party::Account(poster);
            members.retain(|&m| m != poster);
            if has_sent(poster) {
                files.push((poster, Role::Sent));
            }
        }
        for m in members {
            files.push((
                m,
                Role::Received {
                    list: Some(l),
                    spam: false,
                },
            ));
        }
    } else if multi && r < 0.75 {
        ev.kind = Kind::External;
        let primary = w.weights.pick(rng);
        let k = rng.gen_range(2..=4usize);
        let d = w.accounts[primary].domain;
        let mut others = w
            .weights
            .pick_distinct(rng, k - 1, |i| i != primary && w.accounts[i].domain == d);
        if others.len() < k - 1 {
            let more = w.weights.pick_distinct(rng, k - 1 - others.len(), |i| {
                i != primary && !others.contains(&i)
            });
            others.extend(more);
        }
        ev.to = vec![Party::Account(primary)];
        ev.cc = others.iter().map(|&a| Party::Account(a)).collect();
        if chance(rng, 0.3) {
            ev.cc
                .push(Party::External(rng.gen_range(0..w.externals.len())));
        }
        for a in std::iter::once(primary).chain(others) {
            files.push((
                a,
                Role::Received {
                    list: None,
                    spam: false,
                },
            ));
        }
    } else if multi {
        ev.kind = Kind::Internal;
        let sender = sender_with(rng, &has_sent).unwrap_or_else(|| w.weights.pick(rng));
        ev.from = Party::Account(sender);
        let d = w.accounts[sender].domain;
        let k = rng.gen_range(1..=3usize);
        let same_domain = chance(rng, 0.7) && w.by_domain[d].len() > 1;
        let mut rcpts = w.weights.pick_distinct(rng, k, |i| {
            i != sender && (!same_domain || w.accounts[i].domain == d)
        });
        if rcpts.is_empty() {
            rcpts = w.weights.pick_distinct(rng, 1, |i| i != sender);
        }
        ev.to = rcpts.iter().map(|&a| Party::Account(a)).collect();
        if rcpts.len() > 1 && chance(rng, 0.5) {
            let cc = rcpts.len() - 1;
            ev.cc = ev.to.split_off(cc);
        }
        if has_sent(sender) {
            files.push((sender, Role::Sent));
        }
        for a in rcpts {
            files.push((
                a,
                Role::Received {
                    list: None,
                    spam: false,
                },
            ));
        }
    }
    if files.is_empty() {
        // A single file: most mail comes from outside; some is the Sent copy of mail
        // to outside, a little is a draft.
        let r: f64 = rng.gen();
        let drafts = !p.mutation && r > 0.95;
        let sender = if drafts {
            sender_with(rng, &|a| w.accounts[a].drafts.is_some())
        } else if r > 0.75 {
            sender_with(rng, &has_sent)
        } else {
            None
        };
        match sender {
            Some(a) => {
                ev.kind = if drafts { Kind::Draft } else { Kind::Outgoing };
                ev.from = Party::Account(a);
                ev.to = vec![Party::External(rng.gen_range(0..w.externals.len()))];
                files.push((a, if drafts { Role::Draft } else { Role::Sent }));
            }
            None => {
                ev.kind = Kind::External;
                let a = w.weights.pick(rng);
                ev.to = vec![Party::Account(a)];
                let spam = chance(rng, 0.03);
                files.push((a, Role::Received { list: None, spam }));
            }
        }
    }
    files.truncate(max_files.max(1));

    // Content: a reply or a forward of an earlier message, attachments, HTML, oddities.
    if !events.is_empty() && chance(rng, 0.22) {
        let lo = events.len().saturating_sub(300);
        let parent = rng.gen_range(lo..events.len());
        ev.parent = Some(parent);
        ev.subject_seed = events[parent].subject_seed;
    }
    if chance(rng, p.attachment_ratio) {
        if !pool.is_empty() && chance(rng, p.forward_ratio) {
            let (pe, pa) = pool[rng.gen_range(0..pool.len())];
            ev.parent = Some(pe);
            ev.forward = true;
            ev.subject_seed = events[pe].subject_seed;
            ev.attachments = vec![events[pe].attachments[pa].clone()];
        } else {
            let n = match rng.gen_range(0..20) {
                0 => 3,
                1..=3 => 2,
                _ => 1,
            };
            for _ in 0..n {
                ev.attachments.push(Attachment {
                    seed: rng.gen(),
                    len: log_normal_size(
                        rng,
                        p.median_attachment as f64,
                        1.2,
                        512,
                        p.max_attachment,
                    ),
                    kind: rng.gen_range(0..ATTACHMENT_KINDS.len()),
                });
            }
        }
    }
    ev.html = chance(rng, p.html_ratio);
    if chance(rng, p.odd_ratio) {
        ev.odd = match rng.gen_range(0..3) {
            0 => Odd::Crlf,
            1 => Odd::NoFinalNewline,
            _ => Odd::EightBit,
        };
    }

    // Files: folder, flags and name of each copy.
    let pid = rng.gen_range(1000..65_000u32);
    for (a, role) in files {
        let trace = matches!(role, Role::Received { .. });
        let time = if trace {
            date + rng.gen_range(1..40)
        } else {
            date
        };
        let (folder, new, flags) = place(w, p, rng, a, &role, time);
        let host = &w.hosts[w.accounts[a].host % w.hosts.len()];
        let key = loop {
            let key = format!("{time}.M{}P{pid}.{host}", rng.gen_range(0..1_000_000u32));
            if used_keys.insert(key.clone()) {
                break key;
            }
        };
        ev.deliveries.push(Delivery {
            account: a,
            folder,
            time,
            key,
            flags,
            new,
            trace,
        });
    }
    ev
}

/// Folder, `new/`-ness and flags of a file in account `a`.
fn place(
    w: &World,
    p: &PlanParams,
    rng: &mut Rng,
    a: usize,
    role: &Role,
    time: i64,
) -> (u16, bool, String) {
    let acct = &w.accounts[a];
    let age = p.end - time;
    let mut flags: Vec<u8> = Vec::new();
    let (folder, spam) = match *role {
        Role::Sent => (acct.sent.unwrap_or(0), false),
        Role::Draft => (acct.drafts.unwrap_or(0), false),
        Role::Received { list, spam } => {
            if p.mutation {
                (0, false)
            } else if spam && acct.junk.is_some() {
                (acct.junk.unwrap_or(0), true)
            } else {
                let list_folder = list.and_then(|l| {
                    acct.list_folders
                        .iter()
                        .find(|(ll, _)| *ll == l)
                        .map(|&(_, f)| f)
                });
                let r: f64 = rng.gen();
                let year = crate::date::year_of(time);
                let archive = acct
                    .archives
                    .iter()
                    .find(|(y, _)| *y == year)
                    .map(|&(_, f)| f);
                let archive_p = if year + 1 < crate::date::year_of(p.end) {
                    0.7
                } else {
                    0.5
                };
                if let (Some(f), true) = (list_folder, r < 0.95) {
                    (f, false)
                } else if r < 0.04 && acct.trash.is_some() {
                    (acct.trash.unwrap_or(0), false)
                } else if r < 0.09 && !acct.projects.is_empty() {
                    (acct.projects[rng.gen_range(0..acct.projects.len())], false)
                } else if let (Some(f), true) = (archive, chance(rng, archive_p)) {
                    (f, false)
                } else {
                    (0, false)
                }
            }
        }
    };
    match role {
        Role::Sent => flags.push(b'S'),
        Role::Draft => flags.extend_from_slice(b"DS"),
        Role::Received { .. } => {
            let inbox_like = folder == 0 || acct.list_folders.iter().any(|&(_, f)| f == folder);
            // "Recent": the last few days, or the last 2% of a short history.
            let recent = age < (3 * 86_400).max((p.end - p.start) / 50);
            if inbox_like && (recent || p.mutation) && chance(rng, 0.7) {
                return (folder, true, String::new());
            }
            let seen_p = if spam {
                0.3
            } else if age < 7 * 86_400 || p.mutation {
                0.5
            } else {
                0.97
            };
            if chance(rng, seen_p) {
                flags.push(b'S');
                if chance(rng, 0.12) {
                    flags.push(b'R');
                }
            }
            if chance(rng, 0.04) {
                flags.push(b'F');
            }
            if Some(folder) == acct.trash && chance(rng, 0.15) {
                flags.push(b'T');
            }
        }
    }
    if acct.folders[usize::from(folder)].keywords && !acct.keywords.is_empty() && chance(rng, 0.2) {
        let k = rng.gen_range(0..acct.keywords.len());
        flags.push(b'a' + k as u8);
        if acct.keywords.len() > 1 && chance(rng, 0.3) {
            let k2 = rng.gen_range(0..acct.keywords.len());
            let letter = b'a' + k2 as u8;
            if !flags.contains(&letter) {
                flags.push(letter);
            }
        }
    }
    flags.sort_unstable();
    (folder, false, String::from_utf8_lossy(&flags).into_owned())
}
