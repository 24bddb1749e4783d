//! Format 2's padding: any bytes are unpadded or rejected without panicking, and anything
//! padded comes back exactly, at the length Padmé gives.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::format::{pad, padme, unpad};

fuzz_target!(|data: &[u8]| {
    if let Ok(inner) = unpad(data.to_vec(), "fuzz") {
        assert!(inner.len() < data.len());
        assert_eq!(&data[..inner.len()], &inner[..]);
    }
    let padded = pad(data.to_vec());
    assert_eq!(padded.len(), padme(data.len() + 1));
    assert_eq!(unpad(padded, "fuzz").unwrap(), data);
});
