//! `mailvault search`: a query evaluated over the index's splits (what a message says)
//! and the places map (where it is, with which flags, since when; [`super::places`]).
//!
//! Each text, date, size and attachment term is one tantivy query over every live split,
//! giving the contents it matches with their scores (BM25). Account, folder, flag,
//! keyword and `deleted` terms are conditions on a record of the places map. The query
//! tree is then evaluated per record: a content term holds when the record's content is
//! among its matches. When the query cannot hold without some content terms, only the
//! records of the contents they match are looked at. Matching records of the same message
//! file (the same folder, key and content) make one hit, first and last seen; hits are
//! ranked by score, newest first on ties, and only the page shown reads its entries.

use super::places::{flag, Places, Scope, View};
use super::query::{Flag, Query, Term, TextField};
use super::schema::{self, Fields};
use super::split::open_split;
use super::split::{live_splits, LocalSplit};
use crate::error::{Error, Result};
use crate::model::folder_name_selected;
use crate::repo::id::{Id, IdHasher, IdMap, IdSet};
use crate::repo::Repository;
use crate::report::Failure;
use mailvault_imap::maildir_flags::KeywordTable;
use serde::Serialize;
use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::ops::Bound;
use std::path::Path;
use tantivy::collector::{Collector, SegmentCollector};
use tantivy::query::{
    BooleanQuery, Occur, PhrasePrefixQuery, PhraseQuery, Query as TvQuery, RangeQuery, TermQuery,
};
use tantivy::schema::IndexRecordOption;
use tantivy::{DocId, Score, SegmentReader, Term as TvTerm};

/// What to search, and how many hits to give.
#[derive(Clone, Debug)]
pub struct SearchOptions {
    pub scope: Scope,
    /// Only these accounts (all when empty).
    pub accounts: Vec<String>,
    /// Only these folders and their subfolders (all when empty).
    pub folders: Vec<String>,
    /// Hits to skip, then hits to give (pages).
    pub offset: usize,
    pub limit: usize,
    /// Count the hits by account, folder, year and attachment ([`SearchResult::facets`]).
    pub facets: bool,
}

/// One message found: where it is, as its newest matching version has it.
#[derive(Clone, Debug, Serialize, PartialEq)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct Hit {
    /// The message's content id (its keyed hash, hex): what `show` and
    /// `restore --message` take.
    pub id: String,
    pub account: String,
    pub folder: String,
    /// The Maildir key (file name before `:2,`) and the flags and keyword letters.
    pub key: String,
    pub flags: String,
    pub size: u64,
    /// The Date header, and the internal date (the file's mtime), Unix seconds.
    pub date: Option<i64>,
    pub internal_date: i64,
    pub from: String,
    pub subject: String,
    /// The oldest and newest snapshot (of the search's scope) holding it there.
    pub first_snapshot: String,
    pub first_time: i64,
    pub last_snapshot: String,
    pub last_time: i64,
    /// No longer in the newest snapshot of its host and source.
    pub deleted: bool,
    pub score: f32,
}

/// The hits of a search, and what it could not see.
#[derive(Clone, Debug, Default, Serialize)]
#[cfg_attr(feature = "openapi", derive(utoipa::ToSchema))]
pub struct SearchResult {
    /// All hits, before the page was cut.
    pub total: usize,
    /// `total` counts hits after the page whose phrase in the body was not checked (an
    /// upper bound; the hits shown are all checked).
    pub total_unsure: bool,
    pub hits: Vec<Hit>,
    /// Snapshots searched.
    pub snapshots: usize,
    /// Message contents of those snapshots that no split holds yet (`mailvault index`
    /// adds them): text terms cannot find them.
    pub not_indexed: u64,
    pub failures: Vec<Failure>,
    /// How every hit falls by account, folder, year and attachment
    /// ([`SearchOptions::facets`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub facets: Option<super::facets::Facets>,
}

/// Runs `query`. `cache` holds the local copies of the splits and the places map.
pub fn search(
    repo: &Repository,
    cache: &Path,
    query: &Query,
    opts: &SearchOptions,
) -> Result<SearchResult> {
    Searcher::open(repo, cache)?.search(query, opts)
}

/// The index and the places map opened once, for any number of searches (a batch of
/// queries, a server): a search then costs only its own work.
pub struct Searcher<'r> {
    repo: &'r Repository,
    places: Places,
    index: Splits,
    _lock: crate::repo::lock::RepoLock,
}

impl<'r> Searcher<'r> {
    /// Takes a read lock (a prune waits while the searcher lives), copies the live
    /// splits to `cache` and brings the places map there up to date.
    pub fn open(repo: &'r Repository, cache: &Path) -> Result<Searcher<'r>> {
        let lock = repo.lock_for_reading("search")?;
        let splits = live_splits(repo, cache)?;
        let places = Places::open(repo, Some(cache), Some(&splits))?;
        Ok(Searcher {
            repo,
            places,
            index: Splits::open(&splits)?,
            _lock: lock,
        })
    }

    /// The places map it searches with: where each content is, per snapshot (a server
    /// answers "which snapshots hold this message" from it without reading it again).
    pub fn places(&self) -> &Places {
        &self.places
    }

    /// The compact header ([`crate::mail::header::compact`]) of content `hash`, from the
    /// header file of a split that indexes it; `None` when none has it.
    pub fn compact_header(&self, hash: &Id) -> Option<&[u8]> {
        self.index.headers.iter().find_map(|f| f.get(hash))
    }

    /// Runs `query`.
    pub fn search(&self, query: &Query, opts: &SearchOptions) -> Result<SearchResult> {
        run(self.repo, &self.places, &self.index, query, opts)
    }
}

fn run(
    repo: &Repository,
    places: &Places,
    index: &Splits,
    query: &Query,
    opts: &SearchOptions,
) -> Result<SearchResult> {
    // `deleted` compares with older snapshots: all of them are searched.
    let scope = match mentions(query, &|t| matches!(t, Term::Deleted)) {
        true if opts.scope == Scope::Latest => Scope::All,
        _ => opts.scope.clone(),
    };
    let view = places.view(repo, &scope)?;
    let answer = Answer {
        index,
        pending: Default::default(),
    };
    let mut terms = ByTerm::default();
    collect_terms(query, &answer, &mut terms, false)?;
    let mut out = SearchResult {
        snapshots: view.snapshots.len(),
        failures: places.failures(),
        ..SearchResult::default()
    };
    let mut pending = answer.pending.into_inner();
    let mut eval = Eval::new(repo, places, &view, terms, query);
    let selected: Vec<bool> = (places.folders.iter())
        .map(|fk| {
            (opts.accounts.is_empty() || opts.accounts.contains(&fk.account))
                && folder_name_selected(&fk.folder, &opts.folders)
        })
        .collect();
    let in_view = |r: usize| match selected[places.folder(r) as usize] {
        true => places.span(&view, r),
        false => None,
    };
    let records = candidates(places, query, &eval.terms);
    for p in pending.iter_mut().filter(|p| p.negated) {
        let ids: IdSet = (records.iter())
            .map(|&r| *places.content(r))
            .filter(|id| p.ids.contains(id))
            .collect();
        p.ids.clear();
        check_pending(&mut eval, p, ids.into_iter().collect(), &mut out.failures)?;
    }
    // Keys hashed by their key hash and content id, both even already.
    let mut found: HashMap<(u32, u64, Id), Found, BuildHasherDefault<IdHasher>> =
        HashMap::default();
    for r in records {
        let Some((first, last)) = in_view(r) else {
            continue;
        };
        let Some(score) = eval.row(query, r) else {
            continue;
        };
        let key = (places.folder(r), places.key_hash(r), *places.content(r));
        let f = found.entry(key).or_insert(Found {
            score,
            first,
            last,
            record: r,
        });
        f.score = f.score.max(score);
        f.first = f.first.min(first);
        if last >= f.last {
            f.last = last;
            f.record = r;
        }
    }
    let mut unindexed = IdSet::default();
    for r in 0..places.len() {
        if places.flags(r) & flag::INDEXED == 0 && in_view(r).is_some() {
            unindexed.insert(*places.content(r));
        }
    }
    out.not_indexed = unindexed.len() as u64;
    // Pending phrases are checked in rank order past the page: then all are ranked.
    let want = opts.offset.saturating_add(opts.limit);
    let top = pending.iter().all(|p| p.ids.is_empty()).then_some(want);
    let found = ranked(places, found.into_values().collect(), top);
    let (found, unsure) = settle(
        &mut eval,
        query,
        &mut pending,
        found,
        want,
        &mut out.failures,
    )?;
    out.total = found.len();
    out.total_unsure = unsure;
    if opts.facets {
        out.facets = Some(facets_of(places, index, &found)?);
    }
    out.hits = (found.iter().skip(opts.offset).take(opts.limit))
        .map(|f| eval.hit(f))
        .collect::<Result<_>>()?;
    Ok(out)
}

/// How `found` falls by account, folder, year and attachment.
fn facets_of(places: &Places, index: &Splits, found: &[Found]) -> Result<super::facets::Facets> {
    let attached = match content_query(&index.fields, &Term::HasAttachment) {
        Some(q) => index.matches(q.as_ref())?,
        None => IdMap::default(),
    };
    let records = found.iter().map(|f| f.record);
    Ok(super::facets::count(places, records, &attached))
}

/// `found` ranked: by score, then newest first, then by place. With `top`, only the
/// first `top` are put in order (the rest follow in no order: they are only counted).
fn ranked(places: &Places, mut found: Vec<Found>, top: Option<usize>) -> Vec<Found> {
    let order = |a: &Found, b: &Found| {
        (b.score.total_cmp(&a.score))
            .then(places.date(b.record).cmp(&places.date(a.record)))
            .then_with(|| {
                let k = |f: &Found| {
                    let r = f.record;
                    let fk = &places.folders[places.folder(r) as usize];
                    let (key, content) = (places.key_hash(r), places.content(r));
                    (&fk.account, &fk.folder, key, content)
                };
                k(a).cmp(&k(b))
            })
    };
    match top {
        Some(n) if n < found.len() => {
            found.select_nth_unstable_by(n, order);
            found[..n].sort_by(order);
        }
        _ => found.sort_by(order),
    }
    found
}

/// The records that may match `q`: those of the contents a content term it cannot match
/// without names, or every record.
fn candidates(places: &Places, q: &Query, terms: &TermMatches) -> Vec<usize> {
    let Some(sets) = needed(q, terms) else {
        return (0..places.len()).collect();
    };
    let wanted: usize = sets.iter().map(|m| m.len()).sum();
    // A binary search a content, or every record (the evaluation looks each up anyway)
    // when the contents are many: a query matching a fiftieth of the store or more.
    if wanted.saturating_mul(64) > places.len() {
        return (0..places.len()).collect();
    }
    let ids: IdSet = sets.iter().flat_map(|m| m.keys().copied()).collect();
    let mut out: Vec<usize> = ids.iter().flat_map(|id| places.records_of(id)).collect();
    out.sort_unstable();
    out
}

/// Match sets one of which a record's content must be in for `q` to hold, if any.
fn needed<'a>(q: &Query, terms: &'a TermMatches) -> Option<Vec<&'a IdMap<f32>>> {
    match q {
        Query::Term(t) => terms.get(t).map(|m| vec![m]),
        Query::And(qs) => (qs.iter())
            .filter_map(|q| needed(q, terms))
            .min_by_key(|sets| sets.iter().map(|m| m.len()).sum::<usize>()),
        Query::Or(qs) => {
            let mut all = Vec::new();
            for q in qs {
                all.extend(needed(q, terms)?);
            }
            Some(all)
        }
        Query::Not(_) | Query::All => None,
    }
}

/// A message found: its best score, the snapshots holding it (ranks in the view), its
/// newest record.
struct Found {
    score: f32,
    first: u32,
    last: u32,
    record: usize,
}

/// Whether a term of `q` satisfies `f`.
fn mentions(q: &Query, f: &dyn Fn(&Term) -> bool) -> bool {
    match q {
        Query::All => false,
        Query::And(qs) | Query::Or(qs) => qs.iter().any(|q| mentions(q, f)),
        Query::Not(q) => mentions(q, f),
        Query::Term(t) => f(t),
    }
}

/// The live splits, opened.
struct Splits {
    fields: Fields,
    searchers: Vec<tantivy::Searcher>,
    /// Their header files (those that have one).
    headers: Vec<super::headers::HeaderFile>,
}

impl Splits {
    fn open(splits: &[LocalSplit]) -> Result<Splits> {
        let mut searchers = Vec::with_capacity(splits.len());
        let mut headers = Vec::new();
        for s in splits {
            let index = open_split(s)?;
            headers.extend(super::headers::HeaderFile::open(&s.dir)?);
            let reader = index
                .reader_builder()
                .reload_policy(tantivy::ReloadPolicy::Manual)
                .try_into()
                .map_err(|e| Error::search(format!("opening split {}", s.id.short()), e))?;
            searchers.push(reader.searcher());
        }
        Ok(Splits {
            fields: schema::schema().1,
            searchers,
            headers,
        })
    }

    /// The contents `q` matches in any split, with their best score.
    fn matches(&self, q: &dyn TvQuery) -> Result<IdMap<f32>> {
        let mut out = IdMap::default();
        for s in &self.searchers {
            let got = s
                .search(q, &ByContent)
                .map_err(|e| Error::search("searching", e))?;
            for (id, score) in got {
                let best = out.entry(id).or_insert(score);
                *best = best.max(score);
            }
        }
        Ok(out)
    }
}

/// The matches of each content term, by the term's address in the query tree (the tree
/// outlives the map, and one term may appear twice with the same answer).
type TermMatches = ByTerm<IdMap<f32>>;

/// Values by term, a query's few terms searched in order: looked up once per record and
/// term, where hashing the key cost more than the look-up itself.
struct ByTerm<V>(Vec<(*const Term, V)>);

impl<V> Default for ByTerm<V> {
    fn default() -> Self {
        ByTerm(Vec::new())
    }
}

impl<V> ByTerm<V> {
    fn get(&self, t: *const Term) -> Option<&V> {
        self.0.iter().find(|(k, _)| *k == t).map(|(_, v)| v)
    }
    fn get_mut(&mut self, t: *const Term) -> Option<&mut V> {
        self.0.iter_mut().find(|(k, _)| *k == t).map(|(_, v)| v)
    }
    fn insert(&mut self, t: *const Term, v: V) {
        match self.get_mut(t) {
            Some(old) => *old = v,
            None => self.0.push((t, v)),
        }
    }
}

/// What a term is answered against: the index; and the phrases in the body it leaves to check.
struct Answer<'a> {
    index: &'a Splits,
    /// Phrases in the body whose candidates are checked when the page is made.
    pending: std::cell::RefCell<Vec<Pending>>,
}

/// The content terms of `q` (text, date, size, attachment), each with its matches.
fn collect_terms(q: &Query, a: &Answer, out: &mut TermMatches, negated: bool) -> Result<()> {
    match q {
        Query::All => {}
        Query::And(qs) | Query::Or(qs) => {
            for q in qs {
                collect_terms(q, a, out, negated)?;
            }
        }
        Query::Not(q) => collect_terms(q, a, out, !negated)?,
        Query::Term(t) => {
            if let Some(m) = body_phrase(t, a, negated)? {
                out.insert(t as *const Term, m);
            } else if let Some(tq) = content_query(&a.index.fields, t) {
                out.insert(t as *const Term, a.index.matches(tq.as_ref())?);
            }
        }
    }
    Ok(())
}

/// A text term of several words that looks in the body: its matches in the short fields
/// (phrases, by position), and in the body those whose text holds the words in order
/// ([`super::phrase`]); `None` for every other term. The candidates (all the words in
/// the body) count as matches, [`Pending`]: checked when the page is made, or under a
/// negation before the records are evaluated.
fn body_phrase(t: &Term, a: &Answer, negated: bool) -> Result<Option<IdMap<f32>>> {
    let Term::Text {
        field: TextField::Any,
        text,
        prefix,
        ..
    } = t
    else {
        return Ok(None);
    };
    let words = schema::words(text);
    if words.len() < 2 {
        return Ok(None);
    }
    let f = &a.index.fields;
    let short: Vec<(Occur, Box<dyn TvQuery>)> = [f.from, f.to, f.subject, f.filename]
        .into_iter()
        .filter_map(|field| Some((Occur::Should, text_query(field, &words, *prefix)?)))
        .collect();
    let mut found = a.index.matches(&BooleanQuery::new(short))?;
    let all_words: Vec<(Occur, Box<dyn TvQuery>)> = (words.iter().enumerate())
        .filter_map(|(i, w)| {
            let last_prefix = *prefix && i + 1 == words.len();
            Some((
                Occur::Must,
                text_query(f.body, std::slice::from_ref(w), last_prefix)?,
            ))
        })
        .collect();
    let candidates: Vec<(Id, f32)> = (a.index.matches(&BooleanQuery::new(all_words))?)
        .into_iter()
        .filter(|(id, _)| !found.contains_key(id))
        .collect();
    let ids = candidates.iter().map(|c| c.0).collect();
    found.extend(candidates);
    a.pending.borrow_mut().push(Pending {
        term: t,
        words,
        prefix: *prefix,
        ids,
        negated,
    });
    Ok(Some(found))
}

/// A phrase in the body whose candidates are not checked yet.
struct Pending {
    term: *const Term,
    words: Vec<String>,
    prefix: bool,
    ids: IdSet,
    /// Under a negation: a candidate wrongly counted would hide a hit, so the candidates
    /// among the records evaluated are all checked first.
    negated: bool,
}

/// Checks the phrase of `p` in the bodies of `ids` (each read through a record of the
/// view; [`super::phrase::verified`]) and takes those without it out of the term's
/// matches. A message that cannot be read is taken out and reported.
fn check_pending(
    eval: &mut Eval,
    p: &Pending,
    ids: Vec<Id>,
    failures: &mut Vec<Failure>,
) -> Result<()> {
    let (places, view) = (eval.places, eval.view);
    let mut entries = IdMap::default();
    for id in &ids {
        if let Some(r) = places
            .records_of(id)
            .find(|&r| places.span(view, r).is_some())
        {
            entries.insert(*id, places.entry(r)?);
        }
    }
    let candidates = ids.iter().map(|id| (*id, 0.0)).collect();
    let (held, failed) =
        super::phrase::verified(eval.repo, candidates, &entries, &p.words, p.prefix);
    failures.extend(failed);
    for id in ids.iter().filter(|id| !held.contains_key(id)) {
        eval.reject(p.term, id);
    }
    Ok(())
}

/// The hits up to the end of the page made sure of: the pending phrases of the hits in
/// rank order checked, a batch at a time, and the hits they no longer match dropped,
/// until the page is full. The hits after it are kept unchecked: `total` may then count
/// some too many, and says so.
fn settle(
    eval: &mut Eval,
    query: &Query,
    pending: &mut [Pending],
    found: Vec<Found>,
    want: usize,
    failures: &mut Vec<Failure>,
) -> Result<(Vec<Found>, bool)> {
    const BATCH: usize = 64;
    if pending.iter().all(|p| p.ids.is_empty()) {
        return Ok((found, false));
    }
    let places = eval.places;
    let mut kept = Vec::with_capacity(want.min(found.len()));
    let mut rest = found.into_iter().peekable();
    while kept.len() < want && rest.peek().is_some() {
        let batch: Vec<Found> = rest.by_ref().take(BATCH).collect();
        for p in pending.iter_mut() {
            let ids: Vec<Id> = (batch.iter())
                .map(|f| *places.content(f.record))
                .filter(|id| p.ids.remove(id))
                .collect();
            check_pending(eval, p, ids, failures)?;
        }
        for f in batch {
            if let Some(f) = eval.still(query, f) {
                kept.push(f);
            }
        }
    }
    let unsure = rest.peek().is_some() && pending.iter().any(|p| !p.ids.is_empty());
    kept.extend(rest);
    Ok((kept, unsure))
}

/// The tantivy query of a content term; `None` for terms on where a message is.
fn content_query(f: &Fields, t: &Term) -> Option<Box<dyn TvQuery>> {
    match t {
        Term::Text {
            field,
            text,
            phrase: _,
            prefix,
        } => {
            let fields = match field {
                TextField::Any => vec![f.from, f.to, f.subject, f.body, f.filename],
                TextField::From => vec![f.from],
                TextField::To => vec![f.to],
                TextField::Subject => vec![f.subject],
                TextField::Filename => vec![f.filename],
            };
            let words = schema::words(text);
            let per_field: Vec<(Occur, Box<dyn TvQuery>)> = (fields.into_iter())
                .filter_map(|field| Some((Occur::Should, text_query(field, &words, *prefix)?)))
                .collect();
            Some(Box::new(BooleanQuery::new(per_field)))
        }
        Term::Date { from, to } => {
            let b = |v: &Option<i64>, incl: bool| match v {
                Some(v) if incl => Bound::Included(TvTerm::from_field_i64(f.date, *v)),
                Some(v) => Bound::Excluded(TvTerm::from_field_i64(f.date, *v)),
                None => Bound::Unbounded,
            };
            if from.is_none() && to.is_none() {
                return Some(Box::new(tantivy::query::ExistsQuery::new(
                    "date".into(),
                    false,
                )));
            }
            Some(Box::new(RangeQuery::new(b(from, true), b(to, false))))
        }
        Term::Size {
            larger_than,
            smaller_than,
        } => {
            let b = |v: &Option<u64>| match v {
                Some(v) => Bound::Excluded(TvTerm::from_field_u64(f.size, *v)),
                None => Bound::Unbounded,
            };
            if larger_than.is_none() && smaller_than.is_none() {
                return Some(Box::new(tantivy::query::AllQuery));
            }
            Some(Box::new(RangeQuery::new(b(larger_than), b(smaller_than))))
        }
        Term::HasAttachment => Some(Box::new(TermQuery::new(
            TvTerm::from_field_u64(f.attachment, 1),
            IndexRecordOption::Basic,
        ))),
        Term::Account(_) | Term::Folder(_) | Term::Flag(_) | Term::Keyword(_) | Term::Deleted => {
            None
        }
    }
}

/// Words in one field: a word, a prefix, a phrase or a phrase ending in a prefix. `None`
/// when the text has no word (it then matches nothing).
fn text_query(
    field: tantivy::schema::Field,
    words: &[String],
    prefix: bool,
) -> Option<Box<dyn TvQuery>> {
    let terms: Vec<TvTerm> = words
        .iter()
        .map(|w| TvTerm::from_field_text(field, w))
        .collect();
    match (terms.len(), prefix) {
        (0, _) => None,
        (1, false) => Some(Box::new(TermQuery::new(
            terms[0].clone(),
            IndexRecordOption::WithFreqs,
        ))),
        (1, true) => {
            // Every term from the prefix up to the prefix followed by the highest
            // character.
            let upper = TvTerm::from_field_text(field, &format!("{}\u{10FFFF}", words[0]));
            Some(Box::new(RangeQuery::new(
                Bound::Included(terms[0].clone()),
                Bound::Excluded(upper),
            )))
        }
        (_, false) => Some(Box::new(PhraseQuery::new(terms))),
        (_, true) => Some(Box::new(PhrasePrefixQuery::new(terms))),
    }
}

/// Collects every matching document's content id and score.
struct ByContent;

struct ByContentSegment {
    hashes: Option<tantivy::columnar::BytesColumn>,
    docs: Vec<(DocId, Score)>,
}

impl Collector for ByContent {
    type Fruit = Vec<(Id, f32)>;
    type Child = ByContentSegment;

    fn for_segment(&self, _: u32, seg: &SegmentReader) -> tantivy::Result<ByContentSegment> {
        Ok(ByContentSegment {
            hashes: seg.fast_fields().bytes("hash")?,
            docs: Vec::new(),
        })
    }

    fn requires_scoring(&self) -> bool {
        true
    }

    fn merge_fruits(&self, fruits: Vec<Vec<(Id, f32)>>) -> tantivy::Result<Vec<(Id, f32)>> {
        Ok(fruits.into_iter().flatten().collect())
    }
}

impl SegmentCollector for ByContentSegment {
    type Fruit = Vec<(Id, f32)>;

    fn collect(&mut self, doc: DocId, score: Score) {
        self.docs.push((doc, score));
    }

    fn harvest(self) -> Vec<(Id, f32)> {
        let Some(column) = self.hashes else {
            return Vec::new();
        };
        // Ordinals resolved in order, a dictionary block at a time.
        let mut by_ord: Vec<(u64, f32)> = (self.docs.iter())
            .filter_map(|&(doc, score)| Some((column.term_ords(doc).next()?, score)))
            .collect();
        by_ord.sort_unstable_by_key(|p| p.0);
        let ords: Vec<u64> = by_ord.iter().map(|p| p.0).collect();
        let mut out = Vec::with_capacity(ords.len());
        let mut i = 0;
        let _ = column.dictionary().sorted_ords_to_term_cb(&ords, |bytes| {
            if let Ok(h) = <[u8; 32]>::try_from(bytes) {
                out.push((Id(h), by_ord[i].1));
            }
            i += 1;
        });
        out
    }
}

/// Evaluates the query on records.
struct Eval<'a> {
    repo: &'a Repository,
    places: &'a Places,
    view: &'a View,
    terms: TermMatches,
    /// Per account, folder and keyword term, a word per folder: 1 when the term names
    /// the folder (account, folder), or the keyword letters that name the keyword there
    /// (its `dovecot-keywords`).
    per_folder: ByTerm<Vec<u32>>,
    /// Per record, whether it is in the undelete set, when the query asks.
    deleted: Vec<bool>,
}

impl<'a> Eval<'a> {
    fn new(
        repo: &'a Repository,
        places: &'a Places,
        view: &'a View,
        terms: TermMatches,
        query: &Query,
    ) -> Eval<'a> {
        let keywords = match mentions(query, &|t| matches!(t, Term::Keyword(_))) {
            true => places.keywords(repo),
            false => vec![KeywordTable::new(); places.folders.len()],
        };
        let deleted = match mentions(query, &|t| matches!(t, Term::Deleted)) {
            true => places.deleted(view),
            false => Vec::new(),
        };
        let mut per_folder = ByTerm::default();
        place_terms(query, &mut |t| {
            let words: Vec<u32> = (places.folders.iter().zip(&keywords))
                .map(|(fk, table)| match t {
                    Term::Account(a) => fk.account.eq_ignore_ascii_case(a) as u32,
                    Term::Folder(f) => {
                        folder_name_selected(&fk.folder, std::slice::from_ref(f)) as u32
                    }
                    Term::Keyword(k) => (0..26u8)
                        .filter(|i| {
                            (table.name_of(char::from(b'a' + i)))
                                .is_some_and(|n| n.eq_ignore_ascii_case(k))
                        })
                        .fold(0, |m, i| m | 1 << i),
                    _ => 0,
                })
                .collect();
            per_folder.insert(t as *const Term, words);
        });
        Eval {
            repo,
            places,
            view,
            terms,
            per_folder,
            deleted,
        }
    }

    /// The score of record `r`, if it matches `q`.
    fn row(&self, q: &Query, r: usize) -> Option<f32> {
        match q {
            Query::All => Some(0.0),
            Query::And(qs) => qs
                .iter()
                .try_fold(0.0, |sum, q| Some(sum + self.row(q, r)?)),
            Query::Or(qs) => qs.iter().filter_map(|q| self.row(q, r)).reduce(f32::max),
            Query::Not(q) => match self.row(q, r) {
                Some(_) => None,
                None => Some(0.0),
            },
            Query::Term(t) => match self.terms.get(t) {
                Some(m) => m.get(self.places.content(r)).copied(),
                None => self.place(t, r).then_some(0.0),
            },
        }
    }

    /// Takes content `id` out of the matches of term `t`.
    fn reject(&mut self, t: *const Term, id: &Id) {
        if let Some(m) = self.terms.get_mut(t) {
            m.remove(id);
        }
    }

    /// Hit `f` if `q` still holds for one of its records (after [`Self::reject`]): its
    /// newest record, or the newest other that does.
    fn still(&self, q: &Query, mut f: Found) -> Option<Found> {
        if self.row(q, f.record).is_some() {
            return Some(f);
        }
        let p = self.places;
        let same =
            |r: usize| p.folder(r) == p.folder(f.record) && p.key_hash(r) == p.key_hash(f.record);
        let (last, r) = (p.records_of(p.content(f.record)))
            .filter(|&r| same(r) && self.row(q, r).is_some())
            .filter_map(|r| Some((p.span(self.view, r)?.1, r)))
            .max()?;
        (f.last, f.record) = (last, r);
        Some(f)
    }

    /// Whether a term on where a message is holds for record `r`.
    fn place(&self, t: &Term, r: usize) -> bool {
        let folder = self.places.folder(r) as usize;
        let bits = self.places.flags(r);
        let word = || (self.per_folder.get(t)).map_or(0, |w| w[folder]);
        match t {
            Term::Account(_) | Term::Folder(_) => word() != 0,
            Term::Flag(flag) => {
                let bit = match flag {
                    Flag::Seen => flag::SEEN,
                    Flag::Flagged => flag::FLAGGED,
                    Flag::Answered => flag::ANSWERED,
                    Flag::Deleted => flag::DELETED,
                    Flag::Draft => flag::DRAFT,
                };
                bits & bit != 0
            }
            Term::Keyword(k) if k.eq_ignore_ascii_case("$Forwarded") => {
                bits & flag::FORWARDED != 0 || word() & self.places.letters(r) != 0
            }
            Term::Keyword(_) => word() & self.places.letters(r) != 0,
            Term::Deleted => self.deleted.get(r).copied().unwrap_or(false),
            _ => false,
        }
    }

    fn hit(&self, f: &Found) -> Result<Hit> {
        let p = self.places;
        let r = f.record;
        let fk = &p.folders[p.folder(r) as usize];
        let (first, last) = (
            &self.view.snapshots[f.first as usize],
            &self.view.snapshots[f.last as usize],
        );
        let e = p.entry(r)?;
        let account_of = |r: usize| &p.folders[p.folder(r) as usize].account;
        let deleted = !(p.records_of(&e.hash))
            .any(|o| account_of(o) == &fk.account && p.in_newest(self.view, o));
        Ok(Hit {
            id: e.hash.to_hex(),
            account: fk.account.clone(),
            folder: fk.folder.clone(),
            key: String::from_utf8_lossy(&e.key).into(),
            flags: String::from_utf8_lossy(e.flags()).into(),
            size: e.size,
            date: e.date,
            internal_date: e.mtime.secs,
            from: e.from.clone(),
            subject: e.subject.clone(),
            first_snapshot: first.id.to_hex(),
            first_time: first.time,
            last_snapshot: last.id.to_hex(),
            last_time: last.time,
            deleted,
            score: f.score,
        })
    }
}

/// Calls `f` on each account, folder and keyword term of `q`.
fn place_terms(q: &Query, f: &mut dyn FnMut(&Term)) {
    match q {
        Query::All => {}
        Query::And(qs) | Query::Or(qs) => qs.iter().for_each(|q| place_terms(q, f)),
        Query::Not(q) => place_terms(q, f),
        Query::Term(t @ (Term::Account(_) | Term::Folder(_) | Term::Keyword(_))) => f(t),
        Query::Term(_) => {}
    }
}
