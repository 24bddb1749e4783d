//! The audit log read a page at a time. Records are content-named (`audit/<id>`), so
//! their names say nothing of when they were written: each is read once, the first time
//! it is listed, and what the page needs of it is kept ([`Summary`]: its newest event's
//! time and its count, a few dozen bytes). A page then reads only the records that can
//! hold its events, newest first, from a small set of records read last
//! ([`RECENT`]), and stops at the first record all of whose events are older than the
//! page's last: a view costs the page, not the log. The repository is listed again at
//! most every [`RELIST`] (records written by another host), and this server's own
//! records are known from its writes.

use mailvault_core::repo::audit::{self, AuditEvent, AuditRecord};
use mailvault_core::repo::Repository;
use mailvault_core::Result;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Records kept decoded, the last ones read.
const RECENT: usize = 64;
/// How long a listing of `audit/` is taken as current.
pub const RELIST: Duration = Duration::from_secs(60);

/// What a page needs of a record without reading it again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Summary {
    written: i64,
    /// The time of its newest event.
    newest: i64,
    events: usize,
}

impl Summary {
    fn of(r: &AuditRecord) -> Summary {
        Summary {
            written: r.written,
            newest: r.events.iter().map(|e| e.time).max().unwrap_or(i64::MIN),
            events: r.events.len(),
        }
    }
}

/// The records of the repository as far as they are known.
#[derive(Default)]
pub struct Written {
    known: HashMap<String, Summary>,
    /// Those that did not open at the last listing, with why (tried again at the next).
    unreadable: Vec<String>,
    listed: Option<Instant>,
    recent: Recent,
}

/// The records read last, decoded, the last used first.
#[derive(Default)]
struct Recent(VecDeque<(String, Arc<AuditRecord>)>);

/// An event shown on a page, and whether it is written to the repository yet.
pub type Event = (AuditEvent, bool);

/// One page of the log, newest first, and the number of events in all.
pub struct Found {
    pub events: Vec<Event>,
    pub total: usize,
    pub page: usize,
    pub pages: usize,
    pub warnings: Vec<String>,
}

/// Where an event stands among all: its time, then the order it was written in (its
/// record's time and path, its place in the record); events not written yet come last.
type Key<'a> = (i64, i64, &'a str, usize);

impl Recent {
    fn remember(&mut self, path: String, r: Arc<AuditRecord>) {
        self.0.retain(|(p, _)| *p != path);
        self.0.push_front((path, r));
        self.0.truncate(RECENT);
    }

    /// Record `path`, from those read last or from the repository.
    fn get(&mut self, repo: &Repository, path: &str) -> Result<Arc<AuditRecord>> {
        let r = match self.0.iter().find(|(p, _)| p == path) {
            Some((_, r)) => r.clone(),
            None => Arc::new(audit::read(repo, path)?),
        };
        self.remember(path.to_string(), r.clone());
        Ok(r)
    }
}

impl Written {
    /// Takes this server's record `r`, just written at `path`, as read.
    pub fn wrote(&mut self, path: String, r: AuditRecord) {
        self.known.insert(path.clone(), Summary::of(&r));
        self.recent.remember(path, Arc::new(r));
    }

    /// Lists the repository's records when the last listing is older than `relist`, and
    /// reads those not known yet.
    fn refresh(&mut self, repo: &Repository, relist: Duration) -> Result<()> {
        if self.listed.is_some_and(|t| t.elapsed() < relist) {
            return Ok(());
        }
        let paths = audit::paths(repo)?;
        let listed: std::collections::HashSet<&String> = paths.iter().collect();
        self.known.retain(|p, _| listed.contains(p));
        self.unreadable.clear();
        for path in &paths {
            if self.known.contains_key(path) {
                continue;
            }
            match self.recent.get(repo, path) {
                Ok(r) => {
                    self.known.insert(path.clone(), Summary::of(&r));
                }
                Err(e) => self.unreadable.push(audit::unreadable(path, &e)),
            }
        }
        self.listed = Some(Instant::now());
        Ok(())
    }

    /// Page `page` (from 1, clamped) of `per_page` events: the written ones and
    /// `pending` (oldest first), newest first, ties in the reverse of the order they were
    /// recorded in.
    pub fn page(
        &mut self,
        repo: &Repository,
        pending: Vec<AuditEvent>,
        page: usize,
        per_page: usize,
        relist: Duration,
    ) -> Result<Found> {
        self.refresh(repo, relist)?;
        let total = self.known.values().map(|s| s.events).sum::<usize>() + pending.len();
        let pages = total.div_ceil(per_page).max(1);
        let page = page.clamp(1, pages);
        let want = page * per_page;
        let mut got: Vec<(Key, Event)> = (pending.into_iter().enumerate())
            .map(|(i, e)| ((e.time, i64::MAX, "", i), (e, false)))
            .collect();
        let newest_first = |got: &mut Vec<(Key, Event)>| {
            got.sort_by(|a, b| b.0.cmp(&a.0));
            got.truncate(want);
        };
        newest_first(&mut got);
        let mut order: Vec<(&String, &Summary)> = self.known.iter().collect();
        order.sort_by(|a, b| (b.1.newest, b.1.written, b.0).cmp(&(a.1.newest, a.1.written, a.0)));
        let mut warnings = self.unreadable.clone();
        for (path, s) in order {
            // Every event of this record, and of those after it, is older than the page's.
            if got.len() >= want && s.newest < got[want - 1].0 .0 {
                break;
            }
            match self.recent.get(repo, path) {
                Ok(r) => got.extend(
                    (r.events.iter().enumerate())
                        .map(|(i, e)| ((e.time, s.written, path.as_str(), i), (e.clone(), true))),
                ),
                Err(e) => warnings.push(audit::unreadable(path, &e)),
            }
            newest_first(&mut got);
        }
        let events = got.into_iter().skip((page - 1) * per_page).map(|(_, e)| e);
        Ok(Found {
            events: events.collect(),
            total,
            page,
            pages,
            warnings,
        })
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use mailvault_core::repo::crypto::KdfParams;
    use mailvault_core::repo::InitOptions;

    /// A new repository in `dir`, with the cheapest key derivation.
    pub(crate) fn repository(dir: &std::path::Path) -> Repository {
        let opts = InitOptions {
            kdf: KdfParams {
                m_cost: 64,
                t_cost: 1,
                p_cost: 1,
            },
            ..Default::default()
        };
        let store = Arc::new(mailvault_core::store::LocalStore::new(dir));
        Repository::init(store, b"pw", &opts).unwrap()
    }

    fn record(written: i64, times: &[i64]) -> AuditRecord {
        AuditRecord {
            hostname: "h".into(),
            written,
            events: (times.iter())
                .map(|&t| AuditEvent {
                    time: t,
                    who: "admin".into(),
                    address: "127.0.0.1".into(),
                    action: "view".into(),
                    detail: format!("/message?{written}-{t}"),
                    status: 200,
                })
                .collect(),
            lost_before: 0,
        }
    }

    /// Each event of a page as `<record's written>-<time>`.
    fn details(f: &Found) -> Vec<String> {
        (f.events.iter())
            .map(|(e, _)| e.detail.trim_start_matches("/message?").to_string())
            .collect()
    }

    #[test]
    fn a_page_reads_only_the_records_that_can_hold_its_events() {
        let dir = tempfile::tempdir().unwrap();
        let repo = repository(dir.path());
        // Ten records of ten events each, a minute apart; the seventh written late, with
        // events as old as the first's.
        for n in 0..10i64 {
            let base = match n {
                6 => 0,
                n => n * 60,
            };
            let times: Vec<i64> = (0..10).map(|i| base + i).collect();
            audit::write(&repo, &record(1000 + n, &times)).unwrap();
        }
        let mut w = Written::default();
        let pending = vec![record(0, &[10_000]).events[0].clone()];
        let first = w.page(&repo, pending.clone(), 1, 15, RELIST).unwrap();
        assert_eq!((first.total, first.pages, first.page), (101, 7, 1));
        let d = details(&first);
        assert_eq!(d[0], "0-10000", "not written yet, and newest");
        assert!(!first.events[0].1 && first.events[1].1);
        assert_eq!(d[1..3], ["1009-549", "1009-548"]);
        assert_eq!(d.len(), 15);
        assert_eq!(d[14], "1008-486");
        // Again, with no record in memory: the two newest are read, and nothing is listed.
        let listed = w.listed;
        w.recent.0.clear();
        w.page(&repo, Vec::new(), 1, 15, RELIST).unwrap();
        let read: Vec<i64> = w.recent.0.iter().map(|(_, r)| r.written).collect();
        assert_eq!((read, w.listed), (vec![1008, 1009], listed));
        // The last page: the oldest events, where the late record's lie among the first's.
        let last = w.page(&repo, Vec::new(), 99, 15, RELIST).unwrap();
        assert_eq!(last.page, 7);
        let d = details(&last);
        assert_eq!(d.len(), 100 - 6 * 15);
        assert_eq!(
            d[d.len() - 2..],
            ["1006-0", "1000-0"],
            "ties: the later record first"
        );
        // A record written elsewhere shows after the next listing, not before.
        audit::write(&repo, &record(2000, &[20_000])).unwrap();
        let same = w.page(&repo, Vec::new(), 1, 15, RELIST).unwrap();
        assert_eq!(same.total, 100);
        let relisted = w.page(&repo, Vec::new(), 1, 15, Duration::ZERO).unwrap();
        assert_eq!(
            (relisted.total, details(&relisted)[0].as_str()),
            (101, "2000-20000")
        );
    }
}
