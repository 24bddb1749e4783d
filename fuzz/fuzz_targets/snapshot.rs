//! Snapshot JSON (the opened content of a snapshot file) is read or rejected without
//! panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = mailvault_core::snapshot::Snapshot::from_json(data, "snapshots/fuzz");
});
