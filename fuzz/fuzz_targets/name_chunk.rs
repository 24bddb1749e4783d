//! Name chunks (and the other tree blobs a folder is made of) are decoded or rejected
//! without panicking; what decodes encodes back to the same blob.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::tree::{self, FolderNode, NameChunk};

fuzz_target!(|data: &[u8]| {
    if let Ok(n) = tree::decode::<NameChunk>(data, "fuzz") {
        let again: NameChunk = tree::decode(&tree::encode(&n), "fuzz").unwrap();
        assert_eq!(again, n);
    }
    let _ = tree::decode::<FolderNode>(data, "fuzz");
});
