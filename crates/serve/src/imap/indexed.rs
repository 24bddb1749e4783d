//! SEARCH over a folder: each message against every key ([`super::search::matches`]),
//! with BODY and TEXT narrowed by the search index first.
//!
//! A BODY or TEXT key would read and decode every message of the folder (a folder of
//! 100,000 messages: its whole size). When the key is one of those every message must
//! match (not under OR or NOT), the mailbox is a snapshot's folder, and the index holds
//! every message of the account's snapshot, the index is asked first: the messages whose
//! text (body, subject, addresses, file names) holds the string's words as a phrase, its
//! last word as a prefix (`BODY "quarterly rep"` asks for `quarterly` followed by a word
//! starting with `rep`). Only those are read, and matched as before, so a hit is what
//! reading every message would have found; what the index cannot see is a string that
//! starts inside a word (`BODY assassin` does not find `spamassassin`), as with Dovecot's
//! full-text search. A string without a letter or digit, a `Deleted` mailbox, an index
//! that misses messages of the snapshot or fails: every message is read.

use super::fetch::{self, Needs};
use super::search::{self, At, Decoded};
use super::view::{Folder, Place};
use crate::state::{AppState, Live};
use imap_codec::imap_types::search::SearchKey;
use mailvault_core::repo::id::Id;
use mailvault_core::search::exec::SearchOptions;
use mailvault_core::search::places::Scope;
use mailvault_core::search::query::{Query, Term, TextField};
use std::collections::HashSet;

/// The sequence numbers (UIDs when `uid`) of the messages of `f` (mailbox `place` of
/// `account`) that match every key of `criteria`, in order; `Err`: a refusal's text.
pub fn hits(
    st: &AppState,
    (account, place): (&str, Option<&Place>),
    f: &Folder,
    criteria: &[SearchKey<'static>],
    uid: bool,
) -> Result<Vec<u32>, String> {
    let n = f.messages.len() as u32;
    let needs = search::needs(criteria);
    let live = match needs {
        Needs::Nothing => None,
        _ => Some(
            st.live()
                .map_err(|e| format!("cannot read the repository: {e}"))?,
        ),
    };
    let only = live
        .as_deref()
        .and_then(|l| candidates(l, account, place, criteria));
    let mut hits = Vec::new();
    'msgs: for (i, m) in f.messages.iter().enumerate() {
        if only.as_ref().is_some_and(|c| !c.contains(&m.entry.hash)) {
            continue;
        }
        let raw = match &live {
            Some(l) => fetch::bytes(l, &st.0.imap.headers, m, needs)
                .map_err(|e| format!("cannot read message {}: {e}", i + 1))?,
            None => None,
        };
        let text = raw.as_deref().map(Decoded::new);
        let at = At {
            i,
            n,
            last_uid: f.last_uid(),
            text: text.as_ref(),
            modseq: f.modseq.get(),
        };
        for k in criteria {
            if !search::matches(m, at, k)? {
                continue 'msgs;
            }
        }
        hits.push(match uid {
            true => m.uid,
            false => i as u32 + 1,
        });
    }
    Ok(hits)
}

/// The contents the index finds for every BODY and TEXT key of `criteria` that all must
/// match; `None`: there is none, or the index cannot narrow them (module docs).
fn candidates(
    live: &Live,
    account: &str,
    place: Option<&Place>,
    criteria: &[SearchKey<'_>],
) -> Option<HashSet<Id>> {
    let Some(Place::Folder { snapshot, .. }) = place else {
        return None;
    };
    let mut out: Option<HashSet<Id>> = None;
    for k in criteria {
        let (SearchKey::Body(v) | SearchKey::Text(v)) = k else {
            continue;
        };
        let text = String::from_utf8_lossy(v.as_ref()).into_owned();
        if !text.chars().any(char::is_alphanumeric) {
            return None;
        }
        let query = Query::Term(Term::Text {
            field: TextField::Any,
            text,
            phrase: true,
            prefix: true,
        });
        let opts = SearchOptions {
            scope: Scope::One(snapshot.clone()),
            accounts: vec![account.to_string()],
            folders: Vec::new(),
            offset: 0,
            limit: usize::MAX,
            facets: false,
        };
        let found = match live.searcher().search(&query, &opts) {
            Ok(r) if r.not_indexed == 0 && r.failures.is_empty() => r,
            Ok(_) => return None,
            Err(e) => {
                tracing::warn!("imap: the search index could not answer a SEARCH: {e}");
                return None;
            }
        };
        let ids: HashSet<Id> = (found.hits.iter())
            .filter_map(|h| Id::from_hex(&h.id))
            .collect();
        out = Some(match out {
            Some(o) => o.intersection(&ids).copied().collect(),
            None => ids,
        });
    }
    out
}
