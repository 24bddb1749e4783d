//! Per-blob compression: zstd (default), lz4 or none; a blob that does not shrink is stored raw.
//!
//! Mail is millions of small blobs (a header block, a short text body), and a compressor
//! that starts from nothing on each does poorly: it has no history to match. So a
//! repository may hold zstd **dictionaries** trained on its own messages; small blobs are
//! compressed against the repository's dictionary (codec 3), and the dictionary's id is in
//! each zstd frame header, so decompression finds the right one.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::str::FromStr;
use std::sync::Arc;

/// The compression a repository (or one backup run) asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum Compression {
    None,
    Lz4,
    #[default]
    Zstd,
}

impl FromStr for Compression {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "none" => Ok(Compression::None),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(Error::InvalidInput(format!(
                "unknown compression {other:?}: use zstd, lz4 or none"
            ))),
        }
    }
}

impl std::fmt::Display for Compression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Compression::None => "none",
            Compression::Lz4 => "lz4",
            Compression::Zstd => "zstd",
        })
    }
}

/// How one stored blob is encoded; written into pack headers and index entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Codec {
    Raw = 0,
    Zstd = 1,
    Lz4 = 2,
    /// zstd with a repository dictionary, named by the frame header's dictionary id.
    ZstdDict = 3,
    /// Base64 line runs stored decoded, the rest as it is ([`crate::repo::b64`]).
    Base64Runs = 4,
}

impl Codec {
    pub fn from_u8(v: u8) -> Option<Codec> {
        match v {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::Lz4),
            3 => Some(Codec::ZstdDict),
            4 => Some(Codec::Base64Runs),
            _ => None,
        }
    }
}

/// Blobs up to this size are compressed with the dictionary; larger ones have history of
/// their own and gain nothing from it.
pub const DICT_MAX_BLOB: usize = 64 * 1024;
/// Size of a trained dictionary (zstd's recommended ~100 KiB).
pub const DICT_SIZE: usize = 110 * 1024;

/// One trained dictionary, prepared for both directions.
pub struct Dictionary {
    pub id: u32,
    cdict: zstd::dict::EncoderDictionary<'static>,
    ddict: zstd::dict::DecoderDictionary<'static>,
}

/// The dictionaries of a repository: any may be needed to read, one is used to write.
#[derive(Clone, Default)]
pub struct Dictionaries {
    by_id: HashMap<u32, Arc<Dictionary>>,
    encoder: Option<Arc<Dictionary>>,
}

impl Dictionaries {
    /// Adds a dictionary (the raw bytes `train` made); `what` names it for errors.
    pub fn add(&mut self, bytes: &[u8], what: &str) -> Result<u32> {
        let id = zstd::zstd_safe::get_dict_id_from_dict(bytes)
            .ok_or_else(|| Error::corrupt(what, "not a zstd dictionary"))?
            .get();
        let d = Arc::new(Dictionary {
            id,
            cdict: zstd::dict::EncoderDictionary::copy(bytes, ZSTD_LEVEL),
            ddict: zstd::dict::DecoderDictionary::copy(bytes),
        });
        self.by_id.insert(id, d);
        Ok(id)
    }

    /// Makes dictionary `id` the one new blobs are compressed with.
    pub fn set_encoder(&mut self, id: u32) {
        self.encoder = self.by_id.get(&id).cloned();
    }

    pub fn encoder(&self) -> Option<&Dictionary> {
        self.encoder.as_deref()
    }

    pub fn is_empty(&self) -> bool {
        self.by_id.is_empty()
    }

    /// Whether dictionary `id` (a zstd dictionary id) is loaded.
    pub fn has(&self, id: u32) -> bool {
        self.by_id.contains_key(&id)
    }
}

/// Bytes at the start of a zstd frame that always hold its header, and so the id of the
/// dictionary it needs (`ZSTD_FRAMEHEADERSIZE_MAX`).
pub const FRAME_HEADER_MAX: usize = 18;

/// The dictionary a zstd frame needs, from its first bytes (at most
/// [`FRAME_HEADER_MAX`] needed); `None` when it names none.
pub fn frame_dictionary(start: &[u8]) -> Option<u32> {
    zstd::zstd_safe::get_dict_id_from_frame(start).map(|id| id.get())
}

/// Trains a dictionary on sample blobs; `None` when there is too little to learn from.
pub fn train(samples: &[Vec<u8>]) -> Option<Vec<u8>> {
    let total: usize = samples.iter().map(Vec::len).sum();
    if samples.len() < 256 || total < 4 * DICT_SIZE {
        return None;
    }
    zstd::dict::from_samples(samples, DICT_SIZE).ok()
}

/// zstd level used for blobs: level 3 is zstd's own default, the best speed/ratio knee.
const ZSTD_LEVEL: i32 = 3;

/// zstd level used for the chunks of large files (`crate::source::file`): measured on
/// database-like 4 KiB chunks, level -1 compresses twice as fast as level 3 for 0.8% more
/// bytes, level -3 another 10% faster over a whole backup for 1.3% more, level -5 three
/// times as fast as level 3 for 6% more. No dictionary: it is trained on mail.
pub const FILE_ZSTD_LEVEL: i32 = -3;

thread_local! {
    // zstd contexts cost more to create than to compress a small message with: one per
    // worker thread, reused. (Shared ones, one a core, made no difference to a backup's
    // peak RSS with 32 threads: 218 MB either way; its packers were what grew.)
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static FILE_COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
    static CCTX: std::cell::RefCell<zstd::zstd_safe::CCtx<'static>> = std::cell::RefCell::new(zstd::zstd_safe::CCtx::create());
    static DCTX: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> = std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
}

fn compress_with_dict(data: &[u8], d: &Dictionary) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
    CCTX.with(|c| {
        c.borrow_mut()
            .compress_using_cdict(&mut out, data, d.cdict.as_cdict())
    })
    .ok()?;
    Some(out)
}

fn decompress_with_dict(
    data: &[u8],
    raw_len: usize,
    dicts: &Dictionaries,
    what: &str,
) -> Result<Vec<u8>> {
    let id = zstd::zstd_safe::get_dict_id_from_frame(data)
        .ok_or_else(|| Error::corrupt(what, "zstd frame names no dictionary"))?
        .get();
    let d = dicts.by_id.get(&id).ok_or_else(|| {
        Error::corrupt(
            what,
            format!("zstd dictionary {id:08x} is missing from the repository"),
        )
    })?;
    let mut out = Vec::with_capacity(raw_len);
    DCTX.with(|c| {
        c.borrow_mut()
            .decompress_using_ddict(&mut out, data, d.ddict.as_ddict())
    })
    .map_err(|code| {
        Error::corrupt(
            what,
            format!("zstd: {}", zstd::zstd_safe::get_error_name(code)),
        )
    })?;
    Ok(out)
}

fn with_compressor<T>(
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    with_compressor_at(&COMPRESSOR, ZSTD_LEVEL, f)
}

type CompressorSlot =
    std::thread::LocalKey<std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>>>;

fn with_compressor_at<T>(
    slot: &'static CompressorSlot,
    level: i32,
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    slot.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(level)?);
        }
        match c.as_mut() {
            Some(c) => f(c),
            None => Err(std::io::Error::other("no zstd context")),
        }
    })
}

fn with_decompressor<T>(
    f: impl FnOnce(&mut zstd::bulk::Decompressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    DECOMPRESSOR.with(|d| {
        let mut d = d.borrow_mut();
        if d.is_none() {
            *d = Some(zstd::bulk::Decompressor::new()?);
        }
        match d.as_mut() {
            Some(d) => f(d),
            None => Err(std::io::Error::other("no zstd context")),
        }
    })
}

/// Compresses `data` (with `dict` when given and the blob is small); returns `None` when
/// the result would not be smaller (store raw). Whatever the compression asked for, a blob
/// that is mostly base64 lines (an attachment, or a chunk of one) is stored with those
/// lines decoded ([`Codec::Base64Runs`]): as small as zstd makes it and several times
/// faster both ways.
pub fn compress(
    data: &[u8],
    how: Compression,
    dict: Option<&Dictionary>,
) -> Option<(Codec, Vec<u8>)> {
    if how != Compression::None {
        if let Some(enc) = crate::repo::b64::encode(data) {
            return Some((Codec::Base64Runs, enc));
        }
    }
    let out = match how {
        Compression::None => return None,
        Compression::Zstd if dict.is_some() && data.len() <= DICT_MAX_BLOB => {
            (Codec::ZstdDict, compress_with_dict(data, dict?)?)
        }
        Compression::Lz4 => (Codec::Lz4, lz4_flex::block::compress(data)),
        Compression::Zstd => (Codec::Zstd, with_compressor(|c| c.compress(data)).ok()?),
    };
    (out.1.len() < data.len()).then_some(out)
}

/// Compresses a chunk of a large file (`crate::source::file`): zstd at
/// [`FILE_ZSTD_LEVEL`] when `how` is zstd, lz4 when lz4, without the base64 probe or a
/// dictionary (database pages are neither mail nor base64 lines); `None` (store raw) when
/// that does not make it smaller. Read back by [`decompress`] like any blob.
pub fn compress_file_chunk(data: &[u8], how: Compression) -> Option<(Codec, Vec<u8>)> {
    let out = match how {
        Compression::None => return None,
        Compression::Lz4 => (Codec::Lz4, lz4_flex::block::compress(data)),
        Compression::Zstd => (
            Codec::Zstd,
            with_compressor_at(&FILE_COMPRESSOR, FILE_ZSTD_LEVEL, |c| c.compress(data)).ok()?,
        ),
    };
    (out.1.len() < data.len()).then_some(out)
}

/// Reverses [`compress`]; `raw_len` is the length recorded when the blob was stored.
pub fn decompress(
    codec: Codec,
    data: &[u8],
    raw_len: usize,
    what: &str,
    dicts: &Dictionaries,
) -> Result<Vec<u8>> {
    let out = match codec {
        Codec::Raw => data.to_vec(),
        Codec::Base64Runs => crate::repo::b64::decode(data, raw_len)
            .map_err(|e| Error::corrupt(what, format!("base64 runs: {e}")))?,
        Codec::ZstdDict => decompress_with_dict(data, raw_len, dicts, what)?,
        Codec::Lz4 => lz4_flex::block::decompress(data, raw_len)
            .map_err(|e| Error::corrupt(what, format!("lz4: {e}")))?,
        Codec::Zstd => with_decompressor(|d| d.decompress(data, raw_len))
            .map_err(|e| Error::corrupt(what, format!("zstd: {e}")))?,
    };
    if out.len() != raw_len {
        return Err(Error::corrupt(
            what,
            format!("decompressed to {} bytes, expected {raw_len}", out.len()),
        ));
    }
    Ok(out)
}

/// [`decompress`] of a buffer the caller gives up: a raw blob is returned as it is,
/// without a copy (most of a mail store's bytes are attachments stored raw or nearly).
pub fn decompress_owned(
    codec: Codec,
    data: Vec<u8>,
    raw_len: usize,
    what: &str,
    dicts: &Dictionaries,
) -> Result<Vec<u8>> {
    match codec {
        Codec::Raw if data.len() == raw_len => Ok(data),
        _ => decompress(codec, &data, raw_len, what, dicts),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), rep in 0usize..4) {
            let mut data = data;
            for _ in 0..rep { let c = data.clone(); data.extend_from_slice(&c); }
            for how in [Compression::None, Compression::Lz4, Compression::Zstd] {
                match compress(&data, how, None) {
                    None => {}
                    Some((codec, packed)) => {
                        prop_assert!(packed.len() < data.len());
                        let back = decompress(codec, &packed, data.len(), "t", &Dictionaries::default()).unwrap();
                        prop_assert_eq!(&back, &data);
                    }
                }
            }
        }
    }

    /// A raw blob of the wrong length is damage, by either path, and the owned path
    /// returns the same bytes as the borrowing one for every codec.
    #[test]
    fn raw_length_is_checked_and_owned_matches() {
        let d = Dictionaries::default();
        assert!(decompress(Codec::Raw, b"abc", 4, "t", &d).is_err());
        assert!(decompress_owned(Codec::Raw, b"abc".to_vec(), 2, "t", &d).is_err());
        assert_eq!(
            decompress_owned(Codec::Raw, b"abc".to_vec(), 3, "t", &d).unwrap(),
            b"abc"
        );
        let text = b"hello hello hello hello hello hello hello hello".repeat(20);
        for how in [Compression::Lz4, Compression::Zstd] {
            let (codec, packed) = compress(&text, how, None).unwrap();
            let owned = decompress_owned(codec, packed.clone(), text.len(), "t", &d).unwrap();
            assert_eq!(owned, text);
            assert!(decompress_owned(codec, packed, text.len() + 1, "t", &d).is_err());
        }
    }

    /// An attachment in base64 is stored with its lines decoded under zstd and lz4 alike,
    /// never when compression is off, and comes back exactly.
    #[test]
    fn base64_attachments_use_the_runs_codec() {
        let mut part = b"Content-Transfer-Encoding: base64\n\n".to_vec();
        part.extend(crate::repo::b64::test_attachment(30_000, 76, "\n", 99));
        let d = Dictionaries::default();
        for how in [Compression::Zstd, Compression::Lz4] {
            let (codec, packed) = compress(&part, how, None).unwrap();
            assert_eq!(codec, Codec::Base64Runs);
            assert!(packed.len() < part.len() * 3 / 4 + 200);
            assert_eq!(
                decompress(codec, &packed, part.len(), "t", &d).unwrap(),
                part
            );
        }
        assert!(compress(&part, Compression::None, None).is_none());
        assert_eq!(Codec::from_u8(4), Some(Codec::Base64Runs));
    }

    #[test]
    fn incompressible_is_stored_raw() {
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let random: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
        assert!(compress(&random, Compression::Zstd, None).is_none());
        assert!(compress(&random, Compression::Lz4, None).is_none());
        let text = b"hello hello hello hello hello hello hello hello".repeat(20);
        assert!(compress(&text, Compression::Zstd, None).is_some());
        let _ = noise;
    }

    #[test]
    fn wrong_length_is_an_error() {
        let text = b"abcabcabcabcabcabcabcabcabcabcabcabc".repeat(10);
        let (codec, packed) = compress(&text, Compression::Zstd, None).unwrap();
        assert!(decompress(
            codec,
            &packed,
            text.len() + 1,
            "blob x",
            &Dictionaries::default()
        )
        .is_err());
    }

    fn mail_like(i: usize) -> Vec<u8> {
        format!(
            "Received: from mx{i}.example.org by mail.example.org with ESMTP id {i:08x}\nFrom: User {i} <user{i}@example.org>\nTo: team@example.org\nSubject: weekly report number {i}\nMIME-Version: 1.0\nContent-Type: text/plain; charset=utf-8\n\nHello team, here is the report {i}. Regards.\n"
        )
        .into_bytes()
    }

    #[test]
    fn dictionary_compresses_small_blobs_better_and_round_trips() {
        let samples: Vec<Vec<u8>> = (0..2000).map(mail_like).collect();
        let dict = train(&samples).expect("enough samples");
        let mut dicts = Dictionaries::default();
        let id = dicts.add(&dict, "d").unwrap();
        dicts.set_encoder(id);
        let blob = mail_like(99_999);
        let (codec, with) = compress(&blob, Compression::Zstd, dicts.encoder()).unwrap();
        assert_eq!(codec, Codec::ZstdDict);
        let (_, without) = compress(&blob, Compression::Zstd, None).unwrap();
        assert!(
            with.len() * 2 < without.len(),
            "{} vs {}",
            with.len(),
            without.len()
        );
        assert_eq!(
            decompress(codec, &with, blob.len(), "b", &dicts).unwrap(),
            blob
        );
        // Without the dictionary it is a clear error, not garbage.
        assert!(decompress(codec, &with, blob.len(), "b", &Dictionaries::default()).is_err());
        assert!(train(&samples[..10]).is_none());
    }
}
