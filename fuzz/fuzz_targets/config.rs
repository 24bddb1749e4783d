//! The repository config: any plaintext, sealed the format-2 way (as the config) or the
//! format-1 way (no associated data), and any raw bytes, is opened or rejected without
//! panicking; what opens states the format it was sealed as.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::crypto::MasterKey;
use mailvault_core::repo::format::{Object, Version};
use mailvault_core::repo::named::open_config_for_fuzz;
use std::sync::LazyLock;

static KEY: LazyLock<MasterKey> = LazyLock::new(MasterKey::random);

fuzz_target!(|data: &[u8]| {
    let v2 = KEY.seal_ad(data, &Object::Config.aad());
    if let Ok((config, v)) = open_config_for_fuzz(&KEY, v2) {
        assert_eq!(v, Version::V2);
        assert_eq!(config.version, 2);
    }
    if let Ok((config, v)) = open_config_for_fuzz(&KEY, KEY.seal(data)) {
        assert_eq!(v, Version::V1);
        assert_eq!(config.version, 1);
    }
    let _ = open_config_for_fuzz(&KEY, data.to_vec());
});
