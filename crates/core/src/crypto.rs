//! Keys and authenticated encryption.
//!
//! A repository has one random 64-byte master key: the first half keys XChaCha20-Poly1305
//! (every blob, pack header, index, snapshot and the config are sealed with it), the second
//! half keys BLAKE3 for blob ids, so ids reveal nothing about content to someone without the
//! key. The master key is stored in `keys/<id>` wrapped by a key derived from the password
//! with Argon2id.

use crate::error::{Error, Result};
use crate::id::Id;
use chacha20poly1305::aead::{Aead, KeyInit};
use chacha20poly1305::{XChaCha20Poly1305, XNonce};
use rand::RngCore;
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// Bytes added by [`MasterKey::seal`]: a 24-byte nonce and a 16-byte tag.
pub const SEAL_OVERHEAD: usize = 24 + 16;

/// The repository's secret: encryption key and blob-id key.
#[derive(Clone)]
pub struct MasterKey {
    aead: XChaCha20Poly1305,
    id_key: [u8; 32],
    raw: Zeroizing<[u8; 64]>,
}

impl MasterKey {
    pub fn random() -> MasterKey {
        let mut raw = Zeroizing::new([0u8; 64]);
        rand::rngs::OsRng.fill_bytes(raw.as_mut());
        MasterKey::from_bytes(&raw)
    }

    fn from_bytes(raw: &[u8; 64]) -> MasterKey {
        let mut enc = [0u8; 32];
        enc.copy_from_slice(&raw[..32]);
        let mut id_key = [0u8; 32];
        id_key.copy_from_slice(&raw[32..]);
        MasterKey {
            aead: XChaCha20Poly1305::new(&enc.into()),
            id_key,
            raw: Zeroizing::new(*raw),
        }
    }

    /// The id of a blob: keyed BLAKE3 of its plaintext.
    pub fn blob_id(&self, data: &[u8]) -> Id {
        Id(*blake3::keyed_hash(&self.id_key, data).as_bytes())
    }

    /// A keyed hasher for content fed in pieces (gives the same digest as [`Self::blob_id`]).
    pub fn hasher(&self) -> blake3::Hasher {
        blake3::Hasher::new_keyed(&self.id_key)
    }

    /// Encrypts `plain`: returns nonce || ciphertext || tag.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        let mut nonce = [0u8; 24];
        // The thread's CSPRNG (ChaCha12, seeded and reseeded from the OS): a getrandom(2)
        // per blob was a syscall per blob.
        rand::thread_rng().fill_bytes(&mut nonce);
        let mut out = Vec::with_capacity(plain.len() + SEAL_OVERHEAD);
        out.extend_from_slice(&nonce);
        // Encryption with a valid key and nonce cannot fail for in-memory buffers.
        let ct = self
            .aead
            .encrypt(XNonce::from_slice(&nonce), plain)
            .unwrap_or_default();
        out.extend_from_slice(&ct);
        out
    }

    /// Decrypts what [`Self::seal`] made; `what` names the object for the error.
    pub fn open(&self, sealed: &[u8], what: &str) -> Result<Vec<u8>> {
        if sealed.len() < SEAL_OVERHEAD {
            return Err(Error::corrupt(what, "too short to be sealed data"));
        }
        let (nonce, ct) = sealed.split_at(24);
        self.aead
            .decrypt(XNonce::from_slice(nonce), ct)
            .map_err(|_| Error::Tampered(what.to_string()))
    }
}

/// Argon2id cost parameters, stored in each key file.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, PartialEq, Eq)]
pub struct KdfParams {
    /// Memory in KiB.
    pub m_cost: u32,
    pub t_cost: u32,
    pub p_cost: u32,
}

impl Default for KdfParams {
    /// 64 MiB, 3 passes: OWASP's recommended floor for Argon2id is 19 MiB/2 passes; this
    /// costs ~0.1-0.2 s once per command on a server core.
    fn default() -> Self {
        KdfParams {
            m_cost: 64 * 1024,
            t_cost: 3,
            p_cost: 1,
        }
    }
}

/// The JSON stored in `keys/<id>`.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct KeyFile {
    pub version: u32,
    pub kdf: String,
    pub params: KdfParams,
    /// Hex salt for Argon2id.
    pub salt: String,
    /// Hex of the sealed 64-byte master key.
    pub wrapped: String,
    pub created: i64,
    pub hostname: String,
    /// Hex BLAKE3 of the fields above (as JSON with this field empty), so a damaged key
    /// file is told apart from a wrong password.
    #[serde(default)]
    pub checksum: String,
}

fn derive(password: &[u8], salt: &[u8], p: KdfParams) -> Result<XChaCha20Poly1305> {
    let params = argon2::Params::new(p.m_cost, p.t_cost, p.p_cost, Some(32))
        .map_err(|e| Error::corrupt("key file", format!("bad Argon2 parameters: {e}")))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = Zeroizing::new([0u8; 32]);
    argon
        .hash_password_into(password, salt, out.as_mut())
        .map_err(|e| Error::corrupt("key file", format!("Argon2: {e}")))?;
    Ok(XChaCha20Poly1305::new(&(*out).into()))
}

impl KeyFile {
    /// Wraps `master` under `password`.
    pub fn wrap(
        master: &MasterKey,
        password: &[u8],
        params: KdfParams,
        hostname: &str,
    ) -> Result<KeyFile> {
        let mut salt = [0u8; 32];
        rand::rngs::OsRng.fill_bytes(&mut salt);
        let kek = derive(password, &salt, params)?;
        let mut nonce = [0u8; 24];
        rand::rngs::OsRng.fill_bytes(&mut nonce);
        let ct = kek
            .encrypt(XNonce::from_slice(&nonce), master.raw.as_ref())
            .map_err(|_| Error::corrupt("key file", "encryption failed"))?;
        let mut wrapped = nonce.to_vec();
        wrapped.extend_from_slice(&ct);
        let mut kf = KeyFile {
            version: 1,
            kdf: "argon2id".into(),
            params,
            salt: hex::encode(salt),
            wrapped: hex::encode(wrapped),
            created: crate::now_unix(),
            hostname: hostname.into(),
            checksum: String::new(),
        };
        kf.checksum = kf.compute_checksum();
        Ok(kf)
    }

    fn compute_checksum(&self) -> String {
        let mut copy = self.clone();
        copy.checksum.clear();
        let json = serde_json::to_vec(&copy).unwrap_or_default();
        blake3::hash(&json).to_hex().to_string()
    }

    /// Unwraps the master key; `what` names the key file for errors.
    pub fn unwrap(&self, password: &[u8], what: &str) -> Result<MasterKey> {
        if self.checksum != self.compute_checksum() {
            return Err(Error::corrupt(
                what,
                "checksum mismatch: the key file is damaged",
            ));
        }
        if self.kdf != "argon2id" {
            return Err(Error::corrupt(what, format!("unknown kdf {:?}", self.kdf)));
        }
        let salt = hex::decode(&self.salt).map_err(|_| Error::corrupt(what, "bad salt"))?;
        let wrapped = hex::decode(&self.wrapped).map_err(|_| Error::corrupt(what, "bad key"))?;
        if wrapped.len() != 24 + 64 + 16 {
            return Err(Error::corrupt(what, "wrapped key has the wrong length"));
        }
        let kek = derive(password, &salt, self.params)?;
        let raw = Zeroizing::new(
            kek.decrypt(XNonce::from_slice(&wrapped[..24]), &wrapped[24..])
                .map_err(|_| Error::WrongPassword)?,
        );
        let mut key = [0u8; 64];
        key.copy_from_slice(&raw);
        let mk = MasterKey::from_bytes(&key);
        key.iter_mut().for_each(|b| *b = 0);
        Ok(mk)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const FAST: KdfParams = KdfParams {
        m_cost: 64,
        t_cost: 1,
        p_cost: 1,
    };

    #[test]
    fn seal_open_round_trip_and_tamper() {
        let k = MasterKey::random();
        let sealed = k.seal(b"hello");
        assert_eq!(k.open(&sealed, "x").unwrap(), b"hello");
        for i in 0..sealed.len() {
            let mut bad = sealed.clone();
            bad[i] ^= 0x40;
            assert!(
                matches!(k.open(&bad, "x"), Err(Error::Tampered(_))),
                "byte {i}"
            );
        }
        let other = MasterKey::random();
        assert!(other.open(&sealed, "x").is_err());
    }

    #[test]
    fn key_file_wrong_password_and_damage() {
        let k = MasterKey::random();
        let kf = KeyFile::wrap(&k, b"secret", FAST, "h").unwrap();
        let back = kf.unwrap(b"secret", "keys/a").unwrap();
        assert_eq!(back.blob_id(b"x"), k.blob_id(b"x"));
        assert!(matches!(
            kf.unwrap(b"Secret", "keys/a"),
            Err(Error::WrongPassword)
        ));
        let mut bad = kf.clone();
        bad.salt
            .replace_range(0..1, if bad.salt.starts_with('0') { "1" } else { "0" });
        assert!(matches!(
            bad.unwrap(b"secret", "keys/a"),
            Err(Error::Corrupt { .. })
        ));
    }

    #[test]
    fn blob_ids_are_keyed() {
        let a = MasterKey::random();
        let b = MasterKey::random();
        assert_ne!(a.blob_id(b"same"), b.blob_id(b"same"));
        let mut h = a.hasher();
        h.update(b"sa");
        h.update(b"me");
        assert_eq!(Id(*h.finalize().as_bytes()), a.blob_id(b"same"));
    }
}
