//! Index files of both formats are decoded or rejected without panicking, and what decodes
//! encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::format::Version;
use mailvault_core::repo::index::{decode, encode};

fuzz_target!(|data: &[u8]| {
    for v in [Version::V1, Version::V2] {
        if let Ok(packs) = decode(data, v, "fuzz") {
            assert_eq!(encode(&packs, v).unwrap(), data);
        }
    }
});
