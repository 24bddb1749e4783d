//! Message splitting, Maildir name parsing and the base64-runs codec take any bytes; the
//! split covers the message exactly and the codec gives it back exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::split::{split, ChunkerParams};

fuzz_target!(|data: &[u8]| {
    let p = ChunkerParams { single_max: 4096, min: 256, avg: 1024, max: 4096 };
    let mut at = 0;
    for r in split(data, &p) {
        assert_eq!(r.start, at);
        assert!(r.end > r.start);
        at = r.end;
    }
    assert_eq!(at, data.len());
    let (key, info) = mailvault_core::maildir::split_name(data);
    assert!(key.len() + info.len() <= data.len());
    let _ = mailvault_core::backup::header_summary(data);
    if let Some(enc) = mailvault_core::b64::encode(data) {
        assert_eq!(mailvault_core::b64::decode(&enc, data.len()).unwrap(), data);
    }
});
