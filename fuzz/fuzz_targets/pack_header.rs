//! Pack headers: any plaintext, sealed as a header behind any blob bytes, is parsed or
//! rejected without panicking, and what parses covers the blob bytes exactly.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::crypto::MasterKey;
use std::sync::LazyLock;

static KEY: LazyLock<MasterKey> = LazyLock::new(MasterKey::random);

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let at = usize::from(split).min(rest.len());
    let (blobs, header) = rest.split_at(at);
    let sealed = KEY.seal(header);
    let mut pack = blobs.to_vec();
    pack.extend_from_slice(&sealed);
    pack.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
    if let Ok(entries) = mailvault_core::pack::header_of(&pack, &KEY, "fuzz") {
        let total: u64 = entries.iter().map(|e| u64::from(e.stored_len)).sum();
        assert_eq!(total, blobs.len() as u64);
    }
    // And the raw bytes as a whole pack (tail length, truncation).
    let _ = mailvault_core::pack::header_of(data, &KEY, "fuzz");
});
