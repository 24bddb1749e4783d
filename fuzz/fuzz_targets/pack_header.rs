//! Pack headers of both formats: any plaintext, sealed as a header behind any blob bytes
//! (format 1: a plaintext length; format 2: a sealed trailer holding the length, or any
//! other sealed trailer plaintext), is parsed or rejected without panicking, and what parses
//! covers the blob bytes exactly. Any bytes as a whole pack, too.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::crypto::MasterKey;
use mailvault_core::repo::format::{Object, Version};
use mailvault_core::repo::pack::header_of;
use std::sync::LazyLock;

static KEY: LazyLock<MasterKey> = LazyLock::new(MasterKey::random);

const BOTH: [Version; 2] = [Version::V1, Version::V2];

/// Parses `pack` with every set of allowed formats; a parse must cover the blob bytes.
fn parse(pack: &[u8], blobs_len: usize, want: Version) {
    for allowed in [&BOTH[..], &[Version::V1], &[Version::V2]] {
        if let Ok((v, entries)) = header_of(pack, &KEY, "fuzz", allowed) {
            assert!(allowed.contains(&v));
            assert_eq!(v, want);
            let total: u64 = entries.iter().map(|e| u64::from(e.stored_len)).sum();
            assert_eq!(total, blobs_len as u64);
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    let at = usize::from(split >> 1).min(rest.len());
    let (blobs, header) = rest.split_at(at);

    // Format 1: blobs, sealed header, its length in plaintext.
    let sealed = KEY.seal(header);
    let mut pack = blobs.to_vec();
    pack.extend_from_slice(&sealed);
    pack.extend_from_slice(&(sealed.len() as u32).to_le_bytes());
    parse(&pack, blobs.len(), Version::V1);

    // Format 2: blobs, header sealed as one, trailer sealed as one; the trailer holds the
    // header's sealed length, or (odd first byte) the header plaintext's first bytes.
    let sealed = KEY.seal_ad(header, &Object::PackHeader.aad());
    let mut pack = blobs.to_vec();
    pack.extend_from_slice(&sealed);
    let len = match split & 1 {
        0 => (sealed.len() as u32).to_le_bytes().to_vec(),
        _ => header[..header.len().min(6)].to_vec(),
    };
    pack.extend_from_slice(&KEY.seal_ad(&len, &Object::PackTrailer.aad()));
    parse(&pack, blobs.len(), Version::V2);

    // The raw bytes as a whole pack (tail length, truncation).
    for allowed in [&BOTH[..], &[Version::V1], &[Version::V2]] {
        let _ = header_of(data, &KEY, "fuzz", allowed);
    }
});
