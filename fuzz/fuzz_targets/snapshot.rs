//! Snapshot JSON (the opened content of a snapshot file) is read or rejected without
//! panicking.
#![no_main]
use libfuzzer_sys::fuzz_target;

use mailvault_core::repo::format::Version;
use mailvault_core::repo::snapshot::Snapshot;

fuzz_target!(|data: &[u8]| {
    for v in [Version::V1, Version::V2] {
        if let Ok(s) = Snapshot::from_json(data, v, "snapshots/fuzz") {
            assert_eq!(s.version, v.number());
        }
    }
});
