//! The search index's schema: one document per message content, and the analyzer its text
//! goes through (the same for indexing and for queries).

use super::extract::Document;
use super::words::MailTokenizer;
use crate::repo::id::Id;
use tantivy::schema::{
    BytesOptions, IndexRecordOption, NumericOptions, Schema, TextFieldIndexing, TextOptions,
};
use tantivy::tokenizer::{AsciiFoldingFilter, LowerCaser, RemoveLongFilter, TextAnalyzer};
use tantivy::{Index, TantivyDocument};

/// The analyzer's name in an index's tokenizer manager.
pub const ANALYZER: &str = "mailvault";

/// Tokens longer than this (bytes) are not indexed: a megabyte of one "word" (base64 a
/// parser did not decode, a hostile message) must not become a term.
pub const MAX_TOKEN: usize = 40;

/// The fields of the index, by handle.
#[derive(Clone, Copy, Debug)]
pub struct Fields {
    /// The keyed BLAKE3 of the whole message (the snapshot entries' `hash`): what joins a
    /// document to the places that hold the message. A fast column, and indexed so that a
    /// merge can delete the documents of contents no snapshot holds.
    pub hash: tantivy::schema::Field,
    pub from: tantivy::schema::Field,
    pub to: tantivy::schema::Field,
    pub subject: tantivy::schema::Field,
    pub body: tantivy::schema::Field,
    pub filename: tantivy::schema::Field,
    /// The Date header, seconds since the epoch (absent when the message has none).
    pub date: tantivy::schema::Field,
    pub size: tantivy::schema::Field,
    /// 1 when the message has an attachment.
    pub attachment: tantivy::schema::Field,
}

/// The schema and its fields. The short text fields are indexed with positions (phrases),
/// the body without (see [`super::phrase`]); nothing is stored: what a result shows comes
/// from the snapshot's entries.
pub fn schema() -> (Schema, Fields) {
    let mut b = Schema::builder();
    let text = TextOptions::default().set_indexing_options(
        TextFieldIndexing::default()
            .set_tokenizer(ANALYZER)
            .set_index_option(IndexRecordOption::WithFreqsAndPositions),
    );
    let number = NumericOptions::default().set_indexed().set_fast();
    let fields = Fields {
        hash: b.add_bytes_field("hash", BytesOptions::default().set_fast().set_indexed()),
        from: b.add_text_field("from", text.clone()),
        to: b.add_text_field("to", text.clone()),
        subject: b.add_text_field("subject", text.clone()),
        // No positions: a phrase in the body is checked on the message (`super::phrase`).
        body: b.add_text_field(
            "body",
            TextOptions::default().set_indexing_options(
                TextFieldIndexing::default()
                    .set_tokenizer(ANALYZER)
                    .set_index_option(IndexRecordOption::WithFreqs),
            ),
        ),
        filename: b.add_text_field("filename", text),
        date: b.add_i64_field("date", number.clone()),
        size: b.add_u64_field("size", number.clone()),
        attachment: b.add_u64_field("attachment", number),
    };
    (b.build(), fields)
}

/// The analyzer: words (runs of letters and digits; CJK text as pairs of characters,
/// [`super::words`]), long ones dropped, lower-cased, accents folded (`Müller` is found
/// as `muller` and `müller`).
pub fn analyzer() -> TextAnalyzer {
    TextAnalyzer::builder(MailTokenizer::default())
        .filter(RemoveLongFilter::limit(MAX_TOKEN + 1))
        .filter(LowerCaser)
        .filter(AsciiFoldingFilter)
        .build()
}

/// Registers [`analyzer`] with `index` (every index opened or created needs it).
pub fn register(index: &Index) {
    index.tokenizers().register(ANALYZER, analyzer());
}

/// The index document of a message.
pub fn document(f: &Fields, hash: &Id, size: u64, d: &Document) -> TantivyDocument {
    let mut doc = TantivyDocument::default();
    doc.add_bytes(f.hash, &hash.0[..]);
    doc.add_text(f.from, &d.from);
    doc.add_text(f.to, &d.to);
    doc.add_text(f.subject, &d.subject);
    doc.add_text(f.body, &d.body);
    for name in &d.filenames {
        doc.add_text(f.filename, name);
    }
    if let Some(date) = d.date {
        doc.add_i64(f.date, date);
    }
    doc.add_u64(f.size, size);
    doc.add_u64(f.attachment, d.has_attachment as u64);
    doc
}

/// The words `text` is indexed as, in order (what a query's words are matched against).
pub fn words(text: &str) -> Vec<String> {
    let mut a = analyzer();
    let mut stream = a.token_stream(text);
    let mut out = Vec::new();
    while stream.advance() {
        out.push(stream.token().text.clone());
    }
    out
}
