//! Search: any string as a query (parsed or refused with a column inside it), any bytes as a
//! message to index (bounded by extract's caps), and any bytes as a split's plaintext
//! (refused or a header whose files add up), also when compressed, without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::search::{extract, query, split};

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        if let Err(e) = query::parse(text, jiff::Timestamp::UNIX_EPOCH) {
            assert!(e.offset <= text.len());
        }
    }
    let doc = extract::extract(data);
    assert!(doc.body.len() <= extract::MAX_BODY);
    if let Ok(h) = split::split_header(data) {
        let total: u64 = h.files.iter().map(|f| f.1).sum();
        assert!(total <= data.len() as u64);
    }
    // What a seal holds: a zstd frame (or a plaintext) unpacked, then read as a split.
    if let Ok(plain) = split::unpacked(data.to_vec(), "fuzz") {
        let _ = split::split_header(&plain);
    }
});
