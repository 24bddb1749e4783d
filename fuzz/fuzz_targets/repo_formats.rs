//! Decoders of repository formats must reject any input without panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::format::Version;
use mailvault_core::repo::tree::{self, AccountTree, MessageChunk, RootTree};

fuzz_target!(|data: &[u8]| {
    for v in [Version::V1, Version::V2] {
        let _ = mailvault_core::repo::index::decode(data, v, "fuzz");
    }
    let _ = tree::decode::<RootTree>(data, "fuzz");
    let _ = tree::decode::<AccountTree>(data, "fuzz");
    let _ = tree::decode::<MessageChunk>(data, "fuzz");
    if let Some((&n, enc)) = data.split_first() {
        let _ = mailvault_core::repo::b64::decode(enc, usize::from(n) * 61);
    }
});
