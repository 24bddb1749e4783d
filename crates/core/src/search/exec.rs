//! `mailvault search`: a query evaluated over the index's splits (what a message says)
//! and the snapshots' entries (where it is, with which flags, since when).
//!
//! Each text, date, size and attachment term is one tantivy query over every live split,
//! giving the contents it matches with their scores (BM25). Account, folder, flag,
//! keyword and `deleted` terms are conditions on an entry of the catalog. The query tree
//! is then evaluated per entry: a content term holds when the entry's content is among its
//! matches. Matching entries of the same message (the same account, folder, key and
//! content) in several snapshots make one hit, first and last seen; hits are ranked by
//! score, newest first on ties.

use super::catalog::{scoped, Catalog, Group, Scope};
use super::query::{Flag, Query, Term, TextField};
use super::schema::{self, Fields};
use super::split::{indexed_contents, open_split};
use super::split::{live_splits, LocalSplit};
use crate::error::{Error, Result};
use crate::model::folder_name_selected;
use crate::repo::id::Id;
use crate::repo::tree::MessageEntry;
use crate::repo::Repository;
use crate::report::Failure;
use mailvault_imap::maildir_flags::KeywordTable;
use serde::Serialize;
use std::collections::{HashMap, HashSet};
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
}

/// One message found: where it is, as its newest matching version has it.
#[derive(Clone, Debug, Serialize, PartialEq)]
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
pub struct SearchResult {
    /// All hits, before the page was cut.
    pub total: usize,
    pub hits: Vec<Hit>,
    /// Snapshots searched.
    pub snapshots: usize,
    /// Message contents of those snapshots that no split holds yet (`mailvault index`
    /// adds them): text terms cannot find them.
    pub not_indexed: u64,
    pub failures: Vec<Failure>,
}

/// Runs `query`. `cache` holds the local copies of the splits.
pub fn search(
    repo: &Repository,
    cache: &Path,
    query: &Query,
    opts: &SearchOptions,
) -> Result<SearchResult> {
    let _lock = repo.lock_for_reading("search")?;
    let splits = live_splits(repo, cache)?;
    // `deleted` compares with older snapshots: all of them are read.
    let scope = match mentions(query, &|t| matches!(t, Term::Deleted)) {
        true if opts.scope == Scope::Latest => Scope::All,
        _ => opts.scope.clone(),
    };
    let (snapshots, failures) = scoped(repo, &scope)?;
    let catalog = Catalog::read(repo, snapshots);
    let index = Splits::open(&splits)?;
    let entries = catalog.contents();
    let answer = Answer {
        index: &index,
        repo,
        entries: &entries,
        failures: Default::default(),
    };
    let mut terms = HashMap::new();
    collect_terms(query, &answer, &mut terms)?;
    let phrase_failures = answer.failures.into_inner();
    let indexed = indexed_contents(&splits)?;
    let mut out = SearchResult {
        snapshots: catalog.snapshots.len(),
        failures,
        ..SearchResult::default()
    };
    out.failures.extend(catalog.failures.iter().cloned());
    out.failures.extend(phrase_failures);
    let eval = Eval::new(repo, &catalog, &terms, query);
    let mut found: HashMap<(u32, &[u8], Id), Found> = HashMap::new();
    let mut unindexed: HashSet<Id> = HashSet::new();
    for g in &catalog.groups {
        let fk = &catalog.folders[g.folder as usize];
        let selected = (opts.accounts.is_empty() || opts.accounts.contains(&fk.account))
            && folder_name_selected(&fk.folder, &opts.folders);
        if !selected {
            continue;
        }
        for e in &g.entries {
            if !indexed.contains(&e.hash) {
                unindexed.insert(e.hash);
            }
            let Some(score) = eval.row(query, g, e) else {
                continue;
            };
            let f = found
                .entry((g.folder, &e.key[..], e.hash))
                .or_insert_with(|| Found {
                    score,
                    first: u32::MAX,
                    last: 0,
                    entry: e,
                });
            f.score = f.score.max(score);
            for &s in &g.snapshots {
                f.first = f.first.min(s);
                if s >= f.last {
                    f.last = s;
                    f.entry = e;
                }
            }
        }
    }
    out.not_indexed = unindexed.len() as u64;
    let mut hits: Vec<Hit> = (found.into_iter())
        .map(|((folder, _, _), f)| eval.hit(folder, &f))
        .collect();
    hits.sort_by(|a, b| {
        (b.score.total_cmp(&a.score))
            .then(
                b.date
                    .unwrap_or(b.internal_date)
                    .cmp(&a.date.unwrap_or(a.internal_date)),
            )
            .then_with(|| (&a.account, &a.folder, &a.key).cmp(&(&b.account, &b.folder, &b.key)))
    });
    out.total = hits.len();
    out.hits = hits
        .into_iter()
        .skip(opts.offset)
        .take(opts.limit)
        .collect();
    Ok(out)
}

/// A message found: its best score, the snapshots holding it, its newest entry.
struct Found<'a> {
    score: f32,
    first: u32,
    last: u32,
    entry: &'a MessageEntry,
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
}

impl Splits {
    fn open(splits: &[LocalSplit]) -> Result<Splits> {
        let mut searchers = Vec::with_capacity(splits.len());
        for s in splits {
            let index = open_split(s)?;
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
        })
    }

    /// The contents `q` matches in any split, with their best score.
    fn matches(&self, q: &dyn TvQuery) -> Result<HashMap<Id, f32>> {
        let mut out: HashMap<Id, f32> = HashMap::new();
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
type TermMatches = HashMap<*const Term, HashMap<Id, f32>>;

/// What a term is answered against: the index, and for phrases in the body the messages.
struct Answer<'a> {
    index: &'a Splits,
    repo: &'a Repository,
    entries: &'a HashMap<Id, &'a MessageEntry>,
    /// Messages a phrase could not be checked on.
    failures: std::cell::RefCell<Vec<Failure>>,
}

/// The content terms of `q` (text, date, size, attachment), each with its matches.
fn collect_terms(q: &Query, a: &Answer, out: &mut TermMatches) -> Result<()> {
    match q {
        Query::All => {}
        Query::And(qs) | Query::Or(qs) => {
            for q in qs {
                collect_terms(q, a, out)?;
            }
        }
        Query::Not(q) => collect_terms(q, a, out)?,
        Query::Term(t) => {
            if let Some(m) = body_phrase(t, a)? {
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
/// ([`super::phrase`]); `None` for every other term.
fn body_phrase(t: &Term, a: &Answer) -> Result<Option<HashMap<Id, f32>>> {
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
        .filter(|(id, _)| !found.contains_key(id) && a.entries.contains_key(id))
        .collect();
    let (checked, failed) = super::phrase::verified(a.repo, candidates, a.entries, &words, *prefix);
    found.extend(checked);
    a.failures.borrow_mut().extend(failed);
    Ok(Some(found))
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

/// Evaluates the query on entries.
struct Eval<'a> {
    catalog: &'a Catalog,
    terms: &'a TermMatches,
    /// Per folder, its keywords (`dovecot-keywords`), when the query names one.
    keywords: Vec<KeywordTable>,
    /// (account, content) held by the newest snapshot of some host and source.
    latest: HashSet<(&'a str, Id)>,
}

impl<'a> Eval<'a> {
    fn new(
        repo: &Repository,
        catalog: &'a Catalog,
        terms: &'a TermMatches,
        query: &Query,
    ) -> Eval<'a> {
        let mut newest = vec![false; catalog.snapshots.len()];
        let mut last: HashMap<(&str, &str), usize> = HashMap::new();
        for (i, s) in catalog.snapshots.iter().enumerate() {
            last.insert((&s.hostname, &s.source), i);
        }
        for i in last.into_values() {
            newest[i] = true;
        }
        let mut latest = HashSet::new();
        for g in &catalog.groups {
            if g.snapshots.iter().any(|&s| newest[s as usize]) {
                let account = &catalog.folders[g.folder as usize].account;
                latest.extend(g.entries.iter().map(|e| (account.as_str(), e.hash)));
            }
        }
        let keywords = match mentions(query, &|t| matches!(t, Term::Keyword(_))) {
            true => catalog.keywords(repo),
            false => vec![KeywordTable::new(); catalog.folders.len()],
        };
        Eval {
            catalog,
            terms,
            keywords,
            latest,
        }
    }

    /// The score of entry `e` of group `g`, if it matches `q`.
    fn row(&self, q: &Query, g: &Group, e: &MessageEntry) -> Option<f32> {
        match q {
            Query::All => Some(0.0),
            Query::And(qs) => qs
                .iter()
                .try_fold(0.0, |sum, q| Some(sum + self.row(q, g, e)?)),
            Query::Or(qs) => qs.iter().filter_map(|q| self.row(q, g, e)).reduce(f32::max),
            Query::Not(q) => match self.row(q, g, e) {
                Some(_) => None,
                None => Some(0.0),
            },
            Query::Term(t) => match self.terms.get(&(t as *const Term)) {
                Some(m) => m.get(&e.hash).copied(),
                None => self.place(t, g, e).then_some(0.0),
            },
        }
    }

    /// Whether a term on where a message is holds for entry `e` of group `g`.
    fn place(&self, t: &Term, g: &Group, e: &MessageEntry) -> bool {
        let fk = &self.catalog.folders[g.folder as usize];
        match t {
            Term::Account(a) => fk.account.eq_ignore_ascii_case(a),
            Term::Folder(f) => folder_name_selected(&fk.folder, std::slice::from_ref(f)),
            Term::Flag(flag) => {
                let m = crate::dest::meta(e, &self.keywords[g.folder as usize]);
                match flag {
                    Flag::Seen => m.flags.seen,
                    Flag::Flagged => m.flags.flagged,
                    Flag::Answered => m.flags.answered,
                    Flag::Deleted => m.flags.deleted,
                    Flag::Draft => m.flags.draft,
                }
            }
            Term::Keyword(k) => crate::dest::meta(e, &self.keywords[g.folder as usize])
                .keywords
                .iter()
                .any(|have| have.eq_ignore_ascii_case(k)),
            Term::Deleted => !self.latest.contains(&(fk.account.as_str(), e.hash)),
            _ => false,
        }
    }

    fn hit(&self, folder: u32, f: &Found) -> Hit {
        let fk = &self.catalog.folders[folder as usize];
        let (first, last) = (
            &self.catalog.snapshots[f.first as usize],
            &self.catalog.snapshots[f.last as usize],
        );
        let e = f.entry;
        Hit {
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
            deleted: !self.latest.contains(&(fk.account.as_str(), e.hash)),
            score: f.score,
        }
    }
}
