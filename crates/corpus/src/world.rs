//! The cast of a store: domains, accounts with their folders, outside correspondents and
//! mailing lists. Built from a [`CorpusSpec`] for `generate`, or from the directories of
//! an existing store for `mutate`.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use rand::seq::SliceRandom;
use rand::Rng as _;

use crate::date::year_of;
use crate::rng::{chance, log_normal_size, rng_for, Rng, Weighted};
use crate::spec::CorpusSpec;
use crate::words::{
    capitalize, COMPANY_STEMS, EXTERNAL_DOMAINS, FIRST_NAMES, INTERNAL_LISTS, LAST_NAMES,
    LIST_NAMES, ROLE_NAMES,
};

/// Keyword names a `dovecot-keywords` file may map to the letters `a`, `b`, ...
const KEYWORDS: &[&str] = &[
    "$Forwarded",
    "$Junk",
    "NonJunk",
    "$label1",
    "Work",
    "$MDNSent",
    "Personal",
    "$label2",
];

/// One Maildir++ folder.
#[derive(Debug, Clone)]
pub(crate) struct Folder {
    /// Maildir++ name without the leading dot (`Archive.2023`); empty for INBOX.
    pub name: String,
    /// Whether the folder has a `dovecot-keywords` file (and messages with letters).
    pub keywords: bool,
}

impl Folder {
    fn new(name: impl Into<String>) -> Folder {
        Folder {
            name: name.into(),
            keywords: false,
        }
    }

    /// The folder's directory relative to the Maildir.
    pub(crate) fn dir(&self) -> String {
        if self.name.is_empty() {
            String::new()
        } else {
            format!(".{}", self.name)
        }
    }
}

#[derive(Debug, Clone)]
pub(crate) struct Account {
    pub domain: usize,
    pub address: String,
    /// Display name (`Alice Smith`).
    pub display: String,
    /// The Maildir relative to the store root.
    pub maildir: PathBuf,
    pub folders: Vec<Folder>,
    /// Keyword names, letter `a` first.
    pub keywords: Vec<&'static str>,
    pub sent: Option<u16>,
    pub drafts: Option<u16>,
    pub trash: Option<u16>,
    pub junk: Option<u16>,
    pub archives: Vec<(i32, u16)>,
    pub projects: Vec<u16>,
    /// (list, folder) for lists a filter files into their own folder.
    pub list_folders: Vec<(usize, u16)>,
    /// `subscriptions` in Dovecot's version 2 format (else the older one name per line).
    pub subscriptions_v2: bool,
    /// Deliveries carry an `X-Original-To:` line.
    pub x_original_to: bool,
    /// Index into [`World::hosts`]: the server that writes this account's files.
    pub host: usize,
}

impl Account {
    fn add_folder(&mut self, folder: Folder) -> u16 {
        self.folders.push(folder);
        (self.folders.len() - 1) as u16
    }

    pub(crate) fn first_name(&self) -> &str {
        self.display.split(' ').next().unwrap_or("")
    }

    /// Path of a folder's `cur/` or `new/` under `root`.
    pub(crate) fn sub_dir(&self, root: &Path, folder: u16, new: bool) -> PathBuf {
        let mut p = root.join(&self.maildir);
        let dir = self.folders[usize::from(folder)].dir();
        if !dir.is_empty() {
            p.push(dir);
        }
        p.push(if new { "new" } else { "cur" });
        p
    }
}

/// Someone outside the store.
#[derive(Debug, Clone)]
pub(crate) struct Person {
    pub name: String,
    pub address: String,
}

#[derive(Debug, Clone)]
pub(crate) struct MailList {
    pub name: String,
    pub description: String,
    pub address: String,
    /// The list server's host name.
    pub host: String,
    pub members: Vec<usize>,
    /// An alias of a local domain, expanded by the local MTA (no list headers).
    pub internal: bool,
}

#[derive(Debug, Clone)]
pub(crate) struct World {
    pub domains: Vec<String>,
    /// Host names in Maildir file names.
    pub hosts: Vec<String>,
    pub accounts: Vec<Account>,
    /// How much mail each account gets.
    pub weights: Weighted,
    pub by_domain: Vec<Vec<usize>>,
    pub externals: Vec<Person>,
    pub lists: Vec<MailList>,
}

fn display_name(first: &str, last: &str) -> String {
    format!("{} {}", capitalize(first), capitalize(last))
}

fn make_externals(rng: &mut Rng, n: usize) -> Vec<Person> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(n);
    while out.len() < n {
        let first = FIRST_NAMES[rng.gen_range(0..FIRST_NAMES.len())];
        let last = LAST_NAMES[rng.gen_range(0..LAST_NAMES.len())];
        let domain = EXTERNAL_DOMAINS[rng.gen_range(0..EXTERNAL_DOMAINS.len())];
        let local = match rng.gen_range(0..3) {
            0 => format!("{first}.{last}"),
            1 => format!("{}{last}", &first[..1]),
            _ => format!("{first}{}", rng.gen_range(1..99)),
        };
        let address = format!("{local}@{domain}");
        if seen.insert(address.clone()) {
            out.push(Person {
                name: display_name(first, last),
                address,
            });
        }
    }
    out
}

fn external_lists(
    rng: &mut Rng,
    count: usize,
    accounts: usize,
    weights: &Weighted,
) -> Vec<MailList> {
    let mut lists = Vec::new();
    if accounts < 2 {
        return lists;
    }
    for i in 0..count {
        let (name, description) = LIST_NAMES[i % LIST_NAMES.len()];
        let name = if i < LIST_NAMES.len() {
            name.to_string()
        } else {
            format!("{name}-{}", i / LIST_NAMES.len() + 1)
        };
        let host = format!(
            "lists.{}",
            EXTERNAL_DOMAINS[rng.gen_range(0..EXTERNAL_DOMAINS.len())]
        );
        let size = log_normal_size(rng, 4.0, 0.8, 2, accounts.min(60));
        let members = weights.pick_distinct(rng, size, |_| true);
        lists.push(MailList {
            address: format!("{name}@{host}"),
            name,
            description: description.to_string(),
            host,
            members,
            internal: false,
        });
    }
    lists
}

impl World {
    /// The world of a generated store.
    pub(crate) fn generated(spec: &CorpusSpec) -> World {
        let mut rng = rng_for(spec.seed, 1);
        let domains: Vec<String> = (0..spec.domains)
            .map(|i| {
                let stem = COMPANY_STEMS[i % COMPANY_STEMS.len()];
                match i / COMPANY_STEMS.len() {
                    0 => format!("{stem}.example"),
                    n => format!("{stem}{}.example", n + 1),
                }
            })
            .collect();
        let hosts = vec!["mail01".to_string(), "mail02".to_string()];
        let domain_weights = Weighted::new(
            &(0..spec.domains)
                .map(|d| 1.0 / (d as f64 + 1.0))
                .collect::<Vec<_>>(),
        );
        let first_year = year_of(spec.start_time);
        let last_year = year_of(spec.end_time);
        let mut taken: HashSet<(usize, String)> = HashSet::new();
        let mut accounts = Vec::with_capacity(spec.accounts);
        let mut by_domain = vec![Vec::new(); spec.domains];
        for i in 0..spec.accounts {
            let domain = if i < spec.domains {
                i
            } else {
                domain_weights.pick(&mut rng)
            };
            let (user, display) = loop {
                if chance(&mut rng, 0.08) {
                    let role = ROLE_NAMES[rng.gen_range(0..ROLE_NAMES.len())];
                    if taken.insert((domain, role.to_string())) {
                        break (role.to_string(), format!("{} Desk", capitalize(role)));
                    }
                    continue;
                }
                let first = FIRST_NAMES[rng.gen_range(0..FIRST_NAMES.len())];
                let last = LAST_NAMES[rng.gen_range(0..LAST_NAMES.len())];
                let mut user = format!("{first}.{last}");
                let mut n = 2;
                while !taken.insert((domain, user.clone())) {
                    user = format!("{first}.{last}{n}");
                    n += 1;
                }
                break (user, display_name(first, last));
            };
            let address = format!("{user}@{}", domains[domain]);
            let maildir = PathBuf::from(&domains[domain]).join(&user).join("Maildir");
            let mut account = Account {
                domain,
                address,
                display,
                maildir,
                folders: vec![Folder::new("")],
                keywords: Vec::new(),
                sent: None,
                drafts: None,
                trash: None,
                junk: None,
                archives: Vec::new(),
                projects: Vec::new(),
                list_folders: Vec::new(),
                subscriptions_v2: !chance(&mut rng, 0.2),
                x_original_to: chance(&mut rng, 0.3),
                host: domain % hosts.len(),
            };
            account.sent = Some(account.add_folder(Folder::new("Sent")));
            account.drafts = Some(account.add_folder(Folder::new("Drafts")));
            account.trash = Some(account.add_folder(Folder::new("Trash")));
            account.junk = Some(account.add_folder(Folder::new("Junk")));
            for year in first_year..last_year {
                let f = account.add_folder(Folder::new(format!("Archive.{year}")));
                account.archives.push((year, f));
            }
            if chance(&mut rng, 0.4) {
                let alpha = account.add_folder(Folder::new("Projects.Alpha"));
                account.projects.push(alpha);
                if chance(&mut rng, 0.5) {
                    let beta = account.add_folder(Folder::new("Projects.Beta"));
                    account.projects.push(beta);
                }
            }
            if chance(&mut rng, 0.4) {
                let n = rng.gen_range(2..=5);
                account.keywords = KEYWORDS[..n].to_vec();
                account.folders[0].keywords = true;
                for &(_, f) in &account.archives {
                    account.folders[usize::from(f)].keywords = true;
                }
            }
            by_domain[domain].push(i);
            accounts.push(account);
        }

        // A few huge mailboxes, many small: Zipf weights over a random ranking.
        let mut ranks: Vec<usize> = (0..spec.accounts).collect();
        ranks.shuffle(&mut rng);
        let weights = Weighted::new(
            &ranks
                .iter()
                .map(|&r| 1.0 / (r as f64 + 1.0).powf(1.1))
                .collect::<Vec<_>>(),
        );

        let externals = make_externals(&mut rng, (spec.accounts * 3).max(24));
        let list_count = (spec.accounts / 5 + 1).clamp(2, 40);
        let mut lists = external_lists(&mut rng, list_count, spec.accounts, &weights);
        for (d, members) in by_domain.iter().enumerate() {
            if members.len() < 3 {
                continue;
            }
            let size = members.len().min(25);
            let chosen = weights.pick_distinct(&mut rng, size, |i| accounts[i].domain == d);
            let name = INTERNAL_LISTS[d % INTERNAL_LISTS.len()].to_string();
            lists.push(MailList {
                address: format!("{name}@{}", domains[d]),
                description: format!("{} {}", capitalize(&name), domains[d]),
                name,
                host: domains[d].clone(),
                members: chosen,
                internal: true,
            });
        }
        // Some people file list mail with a filter into Lists/<name>.
        let filters: Vec<bool> = (0..spec.accounts).map(|_| chance(&mut rng, 0.5)).collect();
        for (l, list) in lists.iter().enumerate() {
            if list.internal {
                continue;
            }
            for &m in &list.members {
                if filters[m] {
                    let f = accounts[m].add_folder(Folder::new(format!("Lists.{}", list.name)));
                    accounts[m].list_folders.push((l, f));
                }
            }
        }
        World {
            domains,
            hosts,
            accounts,
            weights,
            by_domain,
            externals,
            lists,
        }
    }

    /// The world of an existing store, for new deliveries: `found` are its Maildirs as
    /// (domain, user, relative Maildir path, folder names, message count).
    pub(crate) fn scanned(found: &[crate::scan::FoundMaildir], seed: u64) -> World {
        let mut rng = rng_for(seed, 11);
        let mut domains: Vec<String> = Vec::new();
        let mut by_domain: Vec<Vec<usize>> = Vec::new();
        let mut accounts = Vec::with_capacity(found.len());
        for (i, m) in found.iter().enumerate() {
            let domain = match domains.iter().position(|d| *d == m.domain) {
                Some(d) => d,
                None => {
                    domains.push(m.domain.clone());
                    by_domain.push(Vec::new());
                    domains.len() - 1
                }
            };
            by_domain[domain].push(i);
            let folders: Vec<Folder> = m.folders.iter().map(Folder::new).collect();
            let find = |name: &str| {
                folders
                    .iter()
                    .position(|f| f.name == name)
                    .map(|p| p as u16)
            };
            let (first, last) = match m.user.split_once('.') {
                Some((f, l)) => (f.to_string(), l.to_string()),
                None => (m.user.clone(), "Desk".to_string()),
            };
            accounts.push(Account {
                domain,
                address: format!("{}@{}", m.user, m.domain),
                display: display_name(&first, &last),
                maildir: m.rel.clone(),
                sent: find("Sent"),
                drafts: find("Drafts"),
                trash: find("Trash"),
                junk: find("Junk"),
                folders,
                keywords: Vec::new(),
                archives: Vec::new(),
                projects: Vec::new(),
                list_folders: Vec::new(),
                subscriptions_v2: true,
                x_original_to: chance(&mut rng, 0.3),
                host: domain % 2,
            });
        }
        let weights = Weighted::new(
            &found
                .iter()
                .map(|m| m.messages as f64 + 1.0)
                .collect::<Vec<_>>(),
        );
        let externals = make_externals(&mut rng, (found.len() * 3).max(24));
        let lists = external_lists(
            &mut rng,
            (found.len() / 5 + 1).clamp(2, 40),
            found.len(),
            &weights,
        );
        World {
            domains,
            hosts: vec!["mail01".to_string(), "mail02".to_string()],
            accounts,
            weights,
            by_domain,
            externals,
            lists,
        }
    }
}
