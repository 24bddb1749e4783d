//! A search's facets: how its hits fall by account, folder, year and attachment, counted
//! over every hit (not the page), for the web UI to narrow a search by a click. Each
//! count is of messages, as `total` counts them: a message's newest matching record says
//! where it is and when it is dated.

use super::places::Places;
use crate::repo::id::IdMap;
use serde::Serialize;
use std::collections::HashMap;

/// Values shown per facet, at most (the most frequent).
const MAX_VALUES: usize = 20;

/// How the hits fall.
#[derive(Clone, Debug, Default, Serialize, PartialEq, Eq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Facets {
    /// (account, hits), most first.
    pub accounts: Vec<(String, usize)>,
    /// (folder, hits) over every account, most first.
    pub folders: Vec<(String, usize)>,
    /// (year of the message's date, UTC; hits), newest first.
    pub years: Vec<(i16, usize)>,
    /// Hits with an attachment.
    pub with_attachment: usize,
}

/// The facets of the hits whose records are `records`; `attached`: the contents with an
/// attachment.
pub fn count(
    places: &Places,
    records: impl Iterator<Item = usize>,
    attached: &IdMap<f32>,
) -> Facets {
    let mut accounts: HashMap<&str, usize> = HashMap::new();
    let mut folders: HashMap<&str, usize> = HashMap::new();
    let mut years: HashMap<i16, usize> = HashMap::new();
    let mut with_attachment = 0;
    for r in records {
        let fk = &places.folders[places.folder(r) as usize];
        *accounts.entry(&fk.account).or_default() += 1;
        *folders.entry(&fk.folder).or_default() += 1;
        let year = jiff::Timestamp::from_second(places.date(r))
            .map(|t| t.to_zoned(jiff::tz::TimeZone::UTC).year())
            .unwrap_or(1970);
        *years.entry(year).or_default() += 1;
        with_attachment += usize::from(attached.contains_key(places.content(r)));
    }
    let most = |m: HashMap<&str, usize>| {
        let mut v: Vec<(String, usize)> = m.into_iter().map(|(k, n)| (k.to_string(), n)).collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
        v.truncate(MAX_VALUES);
        v
    };
    let mut years: Vec<(i16, usize)> = years.into_iter().collect();
    years.sort_by_key(|y| std::cmp::Reverse(y.0));
    years.truncate(MAX_VALUES);
    Facets {
        accounts: most(accounts),
        folders: most(folders),
        years,
        with_attachment,
    }
}
