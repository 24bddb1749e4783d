//! Keys and authenticated encryption.
//!
//! A repository has one random 64-byte master key: the first half keys XChaCha20-Poly1305
//! (every blob, pack header, index, snapshot and the config are sealed with it), the second
//! half keys BLAKE3 for blob ids, so ids reveal nothing about content to someone without the
//! key. The master key is stored in `keys/<id>` wrapped by a key derived from the password
//! with Argon2id.
//!
//! XChaCha20-Poly1305 is computed as its definition (draft-irtf-cfrg-xchacha) gives it:
//! HChaCha20 of the key and the nonce's first 16 bytes makes a subkey, and the IETF
//! ChaCha20-Poly1305 of `ring` (BoringSSL's assembly) runs under that subkey with the nonce's
//! last 8 bytes. `ring` has no XChaCha of its own, and RustCrypto's `chacha20poly1305`, which
//! does, opened 1.13 GiB/s on this project's 2-core VM against 2.42 GiB/s here (AVX-512); the
//! AEAD was the largest single cost of restoring and of backing up. The bytes are the same as
//! RustCrypto's, which a test checks both ways.

use crate::error::{Error, Result};
use crate::repo::id::Id;
use rand::RngCore;
use ring::aead::{Aad, LessSafeKey, Nonce, UnboundKey, CHACHA20_POLY1305};
use serde::{Deserialize, Serialize};
use zeroize::Zeroizing;

/// Bytes added by [`MasterKey::seal`]: a 24-byte nonce and a 16-byte tag.
pub const SEAL_OVERHEAD: usize = 24 + TAG_LEN;

/// Bytes of the Poly1305 tag at the end of sealed data.
const TAG_LEN: usize = 16;

/// XChaCha20-Poly1305 under one 32-byte key (see the module's comment for how).
#[derive(Clone)]
struct XChaCha {
    key: Zeroizing<[u8; 32]>,
}

impl XChaCha {
    fn new(key: &[u8; 32]) -> XChaCha {
        XChaCha {
            key: Zeroizing::new(*key),
        }
    }

    /// The IETF ChaCha20-Poly1305 key and nonce that XChaCha20 with `nonce` amounts to.
    fn subkey(&self, nonce: &[u8; 24]) -> (LessSafeKey, Nonce) {
        let mut sub = chacha20::hchacha::<chacha20::cipher::consts::U10>(
            (&*self.key).into(),
            (&nonce[..16]).into(),
        );
        // A 32-byte key is always accepted for CHACHA20_POLY1305.
        let key = UnboundKey::new(&CHACHA20_POLY1305, &sub).expect("32-byte ChaCha20 key");
        sub.iter_mut().for_each(|b| *b = 0);
        let mut n = [0u8; 12];
        n[4..].copy_from_slice(&nonce[16..]);
        (LessSafeKey::new(key), Nonce::assume_unique_for_key(n))
    }

    /// nonce || ciphertext || tag of `plain` and associated data `ad` (format 1 objects
    /// have none) under a fresh random nonce from `rng`.
    fn seal(&self, plain: &[u8], ad: &[u8], rng: &mut impl RngCore) -> Vec<u8> {
        let mut nonce = [0u8; 24];
        rng.fill_bytes(&mut nonce);
        let mut out = Vec::with_capacity(plain.len() + SEAL_OVERHEAD);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(plain);
        let (key, n) = self.subkey(&nonce);
        // Sealing fails only for inputs over 256 GiB, which no blob or object comes near.
        let tag = key
            .seal_in_place_separate_tag(n, Aad::from(ad), &mut out[24..])
            .expect("ChaCha20-Poly1305 input within limits");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// The first `n` bytes of the plaintext of what [`Self::seal`] made, decrypted
    /// without checking the tag: XChaCha20's keystream from block 1 (block 0 keys
    /// Poly1305), as the AEAD's definition has it.
    fn peek(&self, sealed: &[u8], n: usize) -> Option<Vec<u8>> {
        use chacha20::cipher::{KeyIvInit, StreamCipher, StreamCipherSeek};
        if sealed.len() < SEAL_OVERHEAD {
            return None;
        }
        let body = &sealed[24..sealed.len() - TAG_LEN];
        let mut out = body[..n.min(body.len())].to_vec();
        let mut c = chacha20::XChaCha20::new((&*self.key).into(), sealed[..24].into());
        c.seek(64u64);
        c.apply_keystream(&mut out);
        Some(out)
    }

    /// The plaintext of what [`Self::seal`] made with `ad`, or `None` when it does not
    /// authenticate.
    fn open(&self, sealed: &[u8], ad: &[u8]) -> Option<Vec<u8>> {
        self.open_vec(sealed.to_vec(), ad)
    }

    /// [`Self::open`] in the sealed buffer itself: decrypted and moved to its start in one
    /// pass (ring's `open_within`), no second buffer.
    fn open_vec(&self, mut sealed: Vec<u8>, ad: &[u8]) -> Option<Vec<u8>> {
        if sealed.len() < SEAL_OVERHEAD {
            return None;
        }
        let nonce: [u8; 24] = sealed[..24].try_into().ok()?;
        let (key, n) = self.subkey(&nonce);
        let len = key
            .open_within(n, Aad::from(ad), &mut sealed, 24..)
            .ok()?
            .len();
        sealed.truncate(len);
        Some(sealed)
    }
}

/// The repository's secret: encryption key and blob-id key.
#[derive(Clone)]
pub struct MasterKey {
    aead: XChaCha,
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
            aead: XChaCha::new(&enc),
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

    /// [`Self::open`] of a buffer the caller gives up, decrypted in place.
    pub fn open_vec(&self, sealed: Vec<u8>, what: &str) -> Result<Vec<u8>> {
        self.open_vec_ad(sealed, &[], what)
    }

    /// [`Self::open_vec`] of what [`Self::seal_ad`] sealed with associated data `ad`.
    pub fn open_vec_ad(&self, sealed: Vec<u8>, ad: &[u8], what: &str) -> Result<Vec<u8>> {
        if sealed.len() < SEAL_OVERHEAD {
            return Err(Error::corrupt(what, "too short to be sealed data"));
        }
        self.aead
            .open_vec(sealed, ad)
            .ok_or_else(|| Error::Tampered(what.to_string()))
    }

    /// Whether `sealed` opens with associated data `ad`, without keeping the plaintext.
    pub fn opens_with(&self, sealed: &[u8], ad: &[u8]) -> bool {
        sealed.len() >= SEAL_OVERHEAD && self.aead.open(sealed, ad).is_some()
    }

    /// The gear table of format 2's keyed chunker: 256 64-bit values from BLAKE3's
    /// extendable output, keyed by a key derived from the master key, so that chunk
    /// boundaries (and the sizes they leave visible) differ from one repository to the
    /// next, as restic's per-repository polynomial and borg's chunker seed do.
    pub fn gear_table(&self) -> Box<[u64; 256]> {
        let k = blake3::derive_key("mailvault 2026-11-23 chunker gear table", self.raw.as_ref());
        let mut xof = blake3::Hasher::new_keyed(&k).finalize_xof();
        let mut bytes = [0u8; 256 * 8];
        xof.fill(&mut bytes);
        let mut gear = Box::new([0u64; 256]);
        for (g, b) in gear.iter_mut().zip(bytes.chunks_exact(8)) {
            let mut x = [0u8; 8];
            x.copy_from_slice(b);
            *g = u64::from_le_bytes(x);
        }
        gear
    }

    /// The first `n` bytes (or fewer, if shorter) of sealed data, decrypted **without
    /// authenticating** it: for a glance at a blob's first bytes (the zstd frame header
    /// that names its dictionary) where the bytes are known good otherwise (`check` has
    /// compared the pack with its name). Never for content that is used.
    pub fn peek_unauthenticated(&self, sealed: &[u8], n: usize, what: &str) -> Result<Vec<u8>> {
        self.aead
            .peek(sealed, n)
            .ok_or_else(|| Error::corrupt(what, "too short to be sealed data"))
    }

    /// Encrypts `plain` with no associated data (format 1): returns nonce || ciphertext
    /// || tag.
    pub fn seal(&self, plain: &[u8]) -> Vec<u8> {
        self.seal_ad(plain, &[])
    }

    /// Encrypts `plain` and authenticates it with `ad`, which must be given again to
    /// open it (format 2 binds each object's type and name this way).
    pub fn seal_ad(&self, plain: &[u8], ad: &[u8]) -> Vec<u8> {
        // The thread's CSPRNG (ChaCha12, seeded and reseeded from the OS): a getrandom(2)
        // per blob was a syscall per blob.
        self.aead.seal(plain, ad, &mut rand::thread_rng())
    }

    /// Decrypts what [`Self::seal`] made; `what` names the object for the error.
    pub fn open(&self, sealed: &[u8], what: &str) -> Result<Vec<u8>> {
        self.open_vec(sealed.to_vec(), what)
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

#[cfg(test)]
impl KdfParams {
    /// The cheapest parameters Argon2 takes: for tests, whose keys protect nothing.
    pub(crate) const FOR_TESTS: KdfParams = KdfParams {
        m_cost: 64,
        t_cost: 1,
        p_cost: 1,
    };
}

/// The largest Argon2 parameters a key file may ask for: 4 GiB of memory, 64 passes, 64
/// lanes. A key file is plaintext anyone with write access can edit; without bounds, one
/// asking for terabytes would exhaust the machine's memory before the password is even
/// tried. The default (64 MiB, 3 passes, 1 lane) is far below them.
pub const KDF_MAX: KdfParams = KdfParams {
    m_cost: 4 * 1024 * 1024,
    t_cost: 64,
    p_cost: 64,
};

/// The key file format this code reads and writes.
pub const KEY_FILE_VERSION: u32 = 1;

impl KdfParams {
    /// An error naming `what` if the parameters are outside [`KDF_MAX`] or below what
    /// Argon2 accepts (at least 1 pass and lane, at least 8 KiB of memory per lane).
    pub fn validate(&self, what: &str) -> Result<()> {
        let bad = |field: &str, v: u32, max: u32| {
            Error::corrupt(
                what,
                format!("Argon2 {field} {v} is out of bounds (at most {max})"),
            )
        };
        if self.m_cost > KDF_MAX.m_cost {
            return Err(bad("m_cost (KiB)", self.m_cost, KDF_MAX.m_cost));
        }
        if self.t_cost > KDF_MAX.t_cost {
            return Err(bad("t_cost", self.t_cost, KDF_MAX.t_cost));
        }
        if self.p_cost > KDF_MAX.p_cost {
            return Err(bad("p_cost", self.p_cost, KDF_MAX.p_cost));
        }
        argon2::Params::new(self.m_cost, self.t_cost, self.p_cost, Some(32))
            .map(|_| ())
            .map_err(|e| Error::corrupt(what, format!("bad Argon2 parameters: {e}")))
    }
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

fn derive(password: &[u8], salt: &[u8], p: KdfParams) -> Result<XChaCha> {
    p.validate("key file")?;
    let params = argon2::Params::new(p.m_cost, p.t_cost, p.p_cost, Some(32))
        .map_err(|e| Error::corrupt("key file", format!("bad Argon2 parameters: {e}")))?;
    let argon = argon2::Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params);
    let mut out = Zeroizing::new([0u8; 32]);
    argon
        .hash_password_into(password, salt, out.as_mut())
        .map_err(|e| Error::corrupt("key file", format!("Argon2: {e}")))?;
    Ok(XChaCha::new(&out))
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
        let wrapped = kek.seal(master.raw.as_ref(), &[], &mut rand::rngs::OsRng);
        let mut kf = KeyFile {
            version: KEY_FILE_VERSION,
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

    /// Reads a key file's JSON and checks everything that can be checked without the
    /// password: checksum, version, kdf, Argon2 bounds, salt and wrapped key. `what` names
    /// the file for errors.
    pub fn parse(bytes: &[u8], what: &str) -> Result<KeyFile> {
        let kf: KeyFile = serde_json::from_slice(bytes)
            .map_err(|e| Error::corrupt(what, format!("not a key file: {e}")))?;
        kf.validate(what)?;
        Ok(kf)
    }

    fn validate(&self, what: &str) -> Result<()> {
        if self.checksum != self.compute_checksum() {
            return Err(Error::corrupt(
                what,
                "checksum mismatch: the key file is damaged",
            ));
        }
        if self.version != KEY_FILE_VERSION {
            return Err(Error::corrupt(
                what,
                format!(
                    "key file version {} is not supported (this mailvault reads version {KEY_FILE_VERSION})",
                    self.version
                ),
            ));
        }
        if self.kdf != "argon2id" {
            return Err(Error::corrupt(what, format!("unknown kdf {:?}", self.kdf)));
        }
        self.params.validate(what)?;
        let salt = hex::decode(&self.salt).map_err(|_| Error::corrupt(what, "bad salt"))?;
        if salt.len() < argon2::MIN_SALT_LEN || salt.len() > argon2::MAX_SALT_LEN {
            return Err(Error::corrupt(what, "salt has the wrong length"));
        }
        let wrapped = hex::decode(&self.wrapped).map_err(|_| Error::corrupt(what, "bad key"))?;
        if wrapped.len() != SEAL_OVERHEAD + 64 {
            return Err(Error::corrupt(what, "wrapped key has the wrong length"));
        }
        Ok(())
    }

    /// Unwraps the master key; `what` names the key file for errors.
    pub fn unwrap(&self, password: &[u8], what: &str) -> Result<MasterKey> {
        self.validate(what)?;
        let salt = hex::decode(&self.salt).map_err(|_| Error::corrupt(what, "bad salt"))?;
        let wrapped = hex::decode(&self.wrapped).map_err(|_| Error::corrupt(what, "bad key"))?;
        let kek = derive(password, &salt, self.params)?;
        let raw = Zeroizing::new(kek.open(&wrapped, &[]).ok_or(Error::WrongPassword)?);
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

    const FAST: KdfParams = KdfParams::FOR_TESTS;

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
        assert_eq!(k.open_vec(sealed.clone(), "x").unwrap(), b"hello");
        let mut bad = sealed.clone();
        bad[30] ^= 1;
        assert!(matches!(k.open_vec(bad, "x"), Err(Error::Tampered(_))));
        assert!(k.open_vec(sealed[..39].to_vec(), "x").is_err());
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

    /// The format is XChaCha20-Poly1305 whatever computes it: what RustCrypto's
    /// implementation seals, this opens, and the other way round, for lengths around the
    /// cipher's 64-byte blocks and the vector paths' 256- and 512-byte strides.
    #[test]
    fn same_bytes_as_rustcrypto_xchacha20poly1305() {
        use chacha20poly1305::aead::{Aead, KeyInit};
        use chacha20poly1305::{XChaCha20Poly1305, XNonce};
        let key = [0x42u8; 32];
        let ours = XChaCha::new(&key);
        let theirs = XChaCha20Poly1305::new(&key.into());
        let mut rng = rand::thread_rng();
        for len in [
            0, 1, 15, 16, 63, 64, 65, 255, 256, 257, 511, 512, 1000, 4096, 70_001,
        ] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 7 + len) as u8).collect();
            let sealed = ours.seal(&plain, &[], &mut rng);
            let nonce = XNonce::from_slice(&sealed[..24]);
            assert_eq!(
                theirs.decrypt(nonce, &sealed[24..]).unwrap(),
                plain,
                "len {len}"
            );
            let mut back = sealed[..24].to_vec();
            back.extend(theirs.encrypt(nonce, plain.as_slice()).unwrap());
            assert_eq!(back, sealed, "len {len}");
            assert_eq!(ours.open(&back, &[]).unwrap(), plain, "len {len}");
        }
    }

    /// A vector from draft-irtf-cfrg-xchacha-03, appendix A.3.1.
    #[test]
    fn xchacha_draft_test_vector() {
        let key: [u8; 32] =
            hex::decode("808182838485868788898a8b8c8d8e8f909192939495969798999a9b9c9d9e9f")
                .unwrap()
                .try_into()
                .unwrap();
        let nonce = hex::decode("404142434445464748494a4b4c4d4e4f5051525354555657").unwrap();
        let aad = hex::decode("50515253c0c1c2c3c4c5c6c7").unwrap();
        let plain = b"Ladies and Gentlemen of the class of '99: If I could offer you only one tip for the future, sunscreen would be it.";
        let x = XChaCha::new(&key);
        let (k, n) = x.subkey(nonce.as_slice().try_into().unwrap());
        let mut buf = plain.to_vec();
        let tag = k
            .seal_in_place_separate_tag(n, Aad::from(&aad), &mut buf)
            .unwrap();
        assert_eq!(hex::encode(&buf[..16]), "bd6d179d3e83d43b9576579493c0e939");
        assert_eq!(
            hex::encode(tag.as_ref()),
            "c0875924c1c7987947deafd8780acf49"
        );
    }

    #[test]
    fn peek_gives_the_first_bytes_of_the_plaintext() {
        let k = MasterKey::random();
        for len in [0usize, 1, 17, 64, 65, 300] {
            let plain: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
            let sealed = k.seal(&plain);
            for n in [0, 1, 18, 64, 100, 1000] {
                let got = k.peek_unauthenticated(&sealed, n, "x").unwrap();
                assert_eq!(got, plain[..n.min(len)], "len {len} n {n}");
            }
        }
        assert!(k.peek_unauthenticated(&[0; 39], 4, "x").is_err());
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
