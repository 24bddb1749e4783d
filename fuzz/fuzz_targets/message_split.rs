//! Message splitting, Maildir name parsing and the base64-runs codec take any bytes; the
//! split covers the message exactly (with format 1's public and format 2's keyed chunker)
//! and the codec gives it back exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::crypto::MasterKey;
use mailvault_core::repo::split::{split, Chunker, ChunkerParams};
use std::sync::LazyLock;

const PARAMS: ChunkerParams = ChunkerParams {
    single_max: 4096,
    min: 256,
    avg: 1024,
    max: 4096,
};

static CHUNKERS: LazyLock<[Chunker; 2]> = LazyLock::new(|| {
    [
        Chunker::public(PARAMS),
        Chunker::keyed(PARAMS, MasterKey::random().gear_table()),
    ]
});

fuzz_target!(|data: &[u8]| {
    for chunker in CHUNKERS.iter() {
        let mut at = 0;
        for r in split(data, chunker) {
            assert_eq!(r.start, at);
            assert!(r.end > r.start);
            assert!(r.end - r.start <= PARAMS.max as usize || r.start == 0);
            at = r.end;
        }
        assert_eq!(at, data.len());
    }
    let (key, info) = mailvault_core::mail::maildir::split_name(data);
    assert!(key.len() + info.len() <= data.len());
    let _ = mailvault_core::mail::summary::header_summary(data);
    if let Some(enc) = mailvault_core::repo::b64::encode(data) {
        assert_eq!(
            mailvault_core::repo::b64::decode(&enc, data.len()).unwrap(),
            data
        );
    }
});
