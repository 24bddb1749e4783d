//! Key files are read and checked (checksum, version, Argon2 bounds, salt, wrapped key)
//! or rejected without panicking; cheap ones are then tried with a password.
#![no_main]
use libfuzzer_sys::fuzz_target;
use mailvault_core::repo::crypto::KeyFile;

fuzz_target!(|data: &[u8]| {
    if let Ok(kf) = KeyFile::parse(data, "keys/fuzz") {
        // Only small parameters: the bounds allow gigabytes, which a fuzzer must not spend.
        if kf.params.m_cost <= 1024 && kf.params.t_cost <= 2 && kf.params.p_cost <= 2 {
            let _ = kf.unwrap(b"password", "keys/fuzz");
        }
    }
});
