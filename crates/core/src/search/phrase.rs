//! Phrases in the body. The index keeps word positions for the short fields (From, To,
//! Subject, file names) but not for the body, where they were 60% of the index's size
//! (20% of the mail's bytes on the SpamAssassin corpus, against 8% without). A phrase in
//! the body is therefore found as all its words (the index's answer, a superset), and each
//! message found so is read from the repository and its body checked for the words in
//! order: phrases cost a read per candidate, every other query nothing.

use super::extract::extract;
use super::schema::words;
use crate::error::Result;
use crate::model::assemble::assemble;
use crate::repo::id::{Id, IdMap};
use crate::repo::tree::MessageEntry;
use crate::repo::Repository;
use crate::report::Failure;

/// Of `candidates` (contents whose body holds every word), those whose body holds `want`
/// in order, the last word as a prefix when `prefix`; with their scores. A candidate
/// that cannot be read is left out and handed back as a failure naming it.
pub fn verified(
    repo: &Repository,
    candidates: Vec<(Id, f32)>,
    entries: &IdMap<MessageEntry>,
    want: &[String],
    prefix: bool,
) -> (IdMap<f32>, Vec<Failure>) {
    use rayon::prelude::*;
    let checked: Vec<(Id, f32, Result<bool>)> = (candidates.into_par_iter())
        .filter_map(|(id, score)| {
            let e = entries.get(&id)?;
            let r = assemble(repo, &e.content, e.size, Some(&e.hash))
                .map(|raw| holds(&words(&extract(&raw).body), want, prefix));
            Some((id, score, r))
        })
        .collect();
    let mut found = IdMap::default();
    let mut failures = Vec::new();
    for (id, score, r) in checked {
        match r {
            Ok(true) => {
                found.insert(id, score);
            }
            Ok(false) => {}
            Err(e) => failures.push(Failure::new(
                format!("message {} (checking a phrase)", id.short()),
                e,
            )),
        }
    }
    (found, failures)
}

/// Whether `have` holds `want` as consecutive words (the last a prefix when `prefix`).
pub fn holds(have: &[String], want: &[String], prefix: bool) -> bool {
    let Some((last, head)) = want.split_last() else {
        return false;
    };
    have.windows(want.len()).any(|w| {
        w[..head.len()] == *head
            && match prefix {
                true => w[head.len()].starts_with(last.as_str()),
                false => w[head.len()] == *last,
            }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(s: &str) -> Vec<String> {
        words(s)
    }

    #[test]
    fn consecutive_words_in_order() {
        let body = w("The quarterly report is late; report quarterly.");
        assert!(holds(&body, &w("quarterly report"), false));
        assert!(holds(&body, &w("report quarterly"), false));
        assert!(!holds(&body, &w("quarterly late"), false));
        assert!(holds(&body, &w("report is la"), true));
        assert!(!holds(&body, &w("report is la"), false));
        assert!(!holds(&body, &[], false));
        assert!(holds(&w("会議の予定"), &w("議の予"), false));
    }
}
