//! CONDSTORE (RFC 7162) as far as a view that never changes needs it: every message of a
//! mailbox has one mod-sequence, the time of the snapshot the mailbox shows
//! ([`modseq_of`]; the latest snapshot's for `Deleted`), so it grows with each new
//! snapshot of the account and a snapshot's mailbox keeps its own forever. SELECT and
//! EXAMINE answer `[HIGHESTMODSEQ n]`, STATUS answers HIGHESTMODSEQ, FETCH answers the
//! MODSEQ item and takes the CHANGEDSINCE modifier, SEARCH takes the MODSEQ key and then
//! names the highest mod-sequence of what it found; `SELECT mailbox (CONDSTORE)` and
//! `ENABLE CONDSTORE` are taken. Nothing can be stored, so there is no UNCHANGEDSINCE
//! to honour; QRESYNC is not offered.

use super::fetch::Refusal;
use imap_codec::imap_types::command::{FetchModifier, SelectParameter};
use imap_codec::imap_types::extensions::enable::CapabilityEnable;
use imap_codec::imap_types::fetch::{MessageDataItem, MessageDataItemName};
use imap_codec::imap_types::search::SearchKey;
use std::num::NonZeroU64;

/// The mod-sequence of the messages of a snapshot taken at `time` (Unix seconds) and
/// `nanos`: nanoseconds since 1970 (so it grows with every later snapshot, as snapshots
/// are ordered by time and nanoseconds; below 2^63 until the year 2262), at least 1.
pub fn modseq_of(time: i64, nanos: u32) -> NonZeroU64 {
    let n = (time.max(0) as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(u64::from(nanos))
        .min(i64::MAX as u64);
    NonZeroU64::new(n).unwrap_or(NonZeroU64::MIN)
}

/// What a FETCH asks of CONDSTORE.
pub struct FetchAsk {
    /// Only messages whose mod-sequence is above this are answered.
    pub changed_since: Option<u64>,
}

/// Reads a FETCH's `modifiers`: CHANGEDSINCE, which adds the MODSEQ item to `items` (each
/// message answered carries it; [`super::fetch::Pending`] answers it). VANISHED
/// (QRESYNC, not offered) is refused.
pub fn fetch_ask(
    items: &mut Vec<MessageDataItemName<'static>>,
    modifiers: &[FetchModifier],
) -> Result<FetchAsk, Refusal> {
    let mut ask = FetchAsk {
        changed_since: None,
    };
    for m in modifiers {
        match m {
            FetchModifier::ChangedSince(n) => ask.changed_since = Some(n.get()),
            FetchModifier::Vanished => {
                return Err(
                    "VANISHED needs QRESYNC, which the IMAP view of the backups does \
                    not offer"
                        .into(),
                )
            }
        }
    }
    if ask.changed_since.is_some() && !items.contains(&MessageDataItemName::ModSeq) {
        items.push(MessageDataItemName::ModSeq);
    }
    Ok(ask)
}

impl FetchAsk {
    /// Whether a message of mod-sequence `modseq` is answered.
    pub fn wants(&self, modseq: NonZeroU64) -> bool {
        self.changed_since.is_none_or(|n| modseq.get() > n)
    }
}

/// The MODSEQ item of a message of mod-sequence `modseq`, when `items` ask for it.
pub fn modseq_item(
    items: &[MessageDataItemName<'_>],
    modseq: NonZeroU64,
) -> Option<MessageDataItem<'static>> {
    items
        .contains(&MessageDataItemName::ModSeq)
        .then_some(MessageDataItem::ModSeq(modseq))
}

/// Refuses SELECT's QRESYNC parameter (not offered); CONDSTORE is taken.
pub fn select_parameters(params: &[SelectParameter]) -> Result<(), Refusal> {
    match params
        .iter()
        .any(|p| matches!(p, SelectParameter::QResync { .. }))
    {
        true => Err("QRESYNC is not offered by the IMAP view of the backups".into()),
        false => Ok(()),
    }
}

/// What ENABLE enables of `asked`: CONDSTORE, when asked.
pub fn enabled(asked: &[CapabilityEnable<'_>]) -> Vec<CapabilityEnable<'static>> {
    match asked.contains(&CapabilityEnable::CondStore) {
        true => vec![CapabilityEnable::CondStore],
        false => Vec::new(),
    }
}

/// Whether any of `keys` is MODSEQ: the SEARCH answer then names the highest
/// mod-sequence of the messages found (RFC 7162 3.1.5).
pub fn searches_modseq(keys: &[SearchKey<'_>]) -> bool {
    keys.iter().any(|k| match k {
        SearchKey::ModSequence { .. } => true,
        SearchKey::And(v) => searches_modseq(v.as_ref()),
        SearchKey::Or(a, b) => {
            searches_modseq(std::slice::from_ref(a)) || searches_modseq(std::slice::from_ref(b))
        }
        SearchKey::Not(a) => searches_modseq(std::slice::from_ref(a)),
        _ => false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modseqs_grow_with_the_snapshots_time_and_are_never_0() {
        assert!(modseq_of(1_700_000_000, 5) > modseq_of(1_700_000_000, 4));
        assert!(modseq_of(1_700_000_001, 0) > modseq_of(1_700_000_000, 999_999_999));
        assert_eq!(modseq_of(0, 0).get(), 1);
        assert_eq!(modseq_of(-5, 0).get(), 1);
    }

    #[test]
    fn changedsince_implies_the_modseq_item_and_filters() {
        let mut items = vec![MessageDataItemName::Flags, MessageDataItemName::ModSeq];
        let ask = fetch_ask(&mut items, &[]).unwrap();
        assert_eq!(items.len(), 2);
        assert!(ask.wants(NonZeroU64::MIN));
        let m = modseq_item(&items, NonZeroU64::MIN);
        assert_eq!(m, Some(MessageDataItem::ModSeq(NonZeroU64::MIN)));
        let mut items = vec![MessageDataItemName::Flags];
        assert_eq!(modseq_item(&items, NonZeroU64::MIN), None);
        let since = FetchModifier::ChangedSince(NonZeroU64::new(10).unwrap());
        let ask = fetch_ask(&mut items, &[since]).unwrap();
        assert_eq!(
            items,
            [MessageDataItemName::Flags, MessageDataItemName::ModSeq]
        );
        assert!(!ask.wants(NonZeroU64::new(10).unwrap()));
        assert!(ask.wants(NonZeroU64::new(11).unwrap()));
        assert!(fetch_ask(&mut items, &[FetchModifier::Vanished]).is_err());
    }
}
