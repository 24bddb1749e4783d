//! Name chunks (and the other tree blobs a folder is made of) are decoded or rejected
//! without panicking; what decodes encodes back to the same blob.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::tree::{self, AccountTree, NameChunk};

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = tree::decode::<NameChunk>(data, "fuzz") {
        let again: NameChunk = tree::decode(&tree::encode(&n), "fuzz").unwrap();
        assert_eq!(again, n);
    }
    if let Ok(t) = tree::decode::<AccountTree>(data, "fuzz") {
        let again: AccountTree = tree::decode(&tree::encode(&t), "fuzz").unwrap();
        assert_eq!(again, t);
    }
});
