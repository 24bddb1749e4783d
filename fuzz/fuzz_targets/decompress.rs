//! Decompression of every codec takes any bytes and any recorded length without
//! panicking, and what each compression makes comes back exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::compress::{self, Codec, Compression, Dictionaries};
use std::sync::LazyLock;

/// A dictionary trained once on generated mail-like samples.
static DICTS: LazyLock<Dictionaries> = LazyLock::new(|| {
    let samples: Vec<Vec<u8>> = (0..400)
        .map(|i| {
            format!(
                "From: user{i}@example.org\nSubject: report {i}\n\n{}",
                "status line with some words in it\n".repeat(40 + i % 13)
            )
            .into_bytes()
        })
        .collect();
    let mut d = Dictionaries::default();
    if let Some(bytes) = compress::train(&samples) {
        if let Ok(id) = d.add(&bytes, "fuzz dictionary") {
            d.set_encoder(id);
        }
    }
    d
});

fuzz_target!(|data: &[u8]| {
    let dicts = &*DICTS;
    if data.len() >= 3 {
        // Any codec, any recorded length (bounded: a reader allocates it).
        let raw_len = usize::from(u16::from_le_bytes([data[1], data[2]]));
        if let Some(codec) = Codec::from_u8(data[0] % 5) {
            let _ = compress::decompress(codec, &data[3..], raw_len, "fuzz", dicts);
        }
    }
    for how in [Compression::None, Compression::Lz4, Compression::Zstd] {
        if let Some((codec, packed)) = compress::compress(data, how, dicts.encoder()) {
            let back = compress::decompress(codec, &packed, data.len(), "fuzz", dicts).unwrap();
            assert_eq!(back, data);
        }
    }
});
