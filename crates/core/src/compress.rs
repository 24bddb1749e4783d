//! Per-blob compression: zstd (default), lz4 or none; a blob that does not shrink is stored raw.

use crate::error::{Error, Result};
use serde::{Deserialize, Serialize};
use std::str::FromStr;

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
}

impl Codec {
    pub fn from_u8(v: u8) -> Option<Codec> {
        match v {
            0 => Some(Codec::Raw),
            1 => Some(Codec::Zstd),
            2 => Some(Codec::Lz4),
            _ => None,
        }
    }
}

/// zstd level used for blobs: level 3 is zstd's own default, the best speed/ratio knee.
const ZSTD_LEVEL: i32 = 3;

thread_local! {
    // zstd contexts cost more to create than to compress a small message with: one per
    // worker thread, reused.
    static COMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Compressor<'static>>> = const { std::cell::RefCell::new(None) };
    static DECOMPRESSOR: std::cell::RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { std::cell::RefCell::new(None) };
}

fn with_compressor<T>(
    f: impl FnOnce(&mut zstd::bulk::Compressor<'static>) -> std::io::Result<T>,
) -> std::io::Result<T> {
    COMPRESSOR.with(|c| {
        let mut c = c.borrow_mut();
        if c.is_none() {
            *c = Some(zstd::bulk::Compressor::new(ZSTD_LEVEL)?);
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

/// Compresses `data`; returns `None` when the result would not be smaller (store raw).
pub fn compress(data: &[u8], how: Compression) -> Option<(Codec, Vec<u8>)> {
    let out = match how {
        Compression::None => return None,
        Compression::Lz4 => (Codec::Lz4, lz4_flex::block::compress(data)),
        Compression::Zstd => (Codec::Zstd, with_compressor(|c| c.compress(data)).ok()?),
    };
    (out.1.len() < data.len()).then_some(out)
}

/// Reverses [`compress`]; `raw_len` is the length recorded when the blob was stored.
pub fn decompress(codec: Codec, data: &[u8], raw_len: usize, what: &str) -> Result<Vec<u8>> {
    let out = match codec {
        Codec::Raw => return Ok(data.to_vec()),
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
                match compress(&data, how) {
                    None => {}
                    Some((codec, packed)) => {
                        prop_assert!(packed.len() < data.len());
                        let back = decompress(codec, &packed, data.len(), "t").unwrap();
                        prop_assert_eq!(&back, &data);
                    }
                }
            }
        }
    }

    #[test]
    fn incompressible_is_stored_raw() {
        let noise: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let random: Vec<u8> = (0..4096).map(|_| rand::random::<u8>()).collect();
        assert!(compress(&random, Compression::Zstd).is_none());
        assert!(compress(&random, Compression::Lz4).is_none());
        let text = b"hello hello hello hello hello hello hello hello".repeat(20);
        assert!(compress(&text, Compression::Zstd).is_some());
        let _ = noise;
    }

    #[test]
    fn wrong_length_is_an_error() {
        let text = b"abcabcabcabcabcabcabcabcabcabcabcabc".repeat(10);
        let (codec, packed) = compress(&text, Compression::Zstd).unwrap();
        assert!(decompress(codec, &packed, text.len() + 1, "blob x").is_err());
    }
}
