//! Sealing and opening the repository's objects: the content-named metadata files
//! (index, snapshot, dictionary, forgotten), the config, and the format-2 binding of an
//! object's type and name.

use crate::error::{Error, Result};
use crate::repo::crypto::MasterKey;
use crate::repo::format::{Object, Version};
use crate::repo::id::Id;
use crate::repo::seal::{open_as, seal_as};
use crate::repo::{file_id, format};
use crate::repo::{Config, Repository};
use crate::store::Store;

impl Repository {
    /// Seals `plain` as `obj`: in format 2 with the object's associated data, in format 1
    /// without.
    pub fn seal_object(&self, obj: Object, plain: &[u8]) -> Vec<u8> {
        seal_as(&self.key, self.version, obj, plain)
    }

    /// Opens what [`Self::seal_object`] sealed as `obj`; `what` names it for errors. In
    /// format 2, an object that does not open as `obj` is an error saying that
    /// it was expected there (swapped, renamed, replayed or damaged), or, when it opens
    /// without associated data, that it is a format-1 object.
    pub fn open_object(&self, obj: Object, sealed: Vec<u8>, what: &str) -> Result<Vec<u8>> {
        open_as(&self.key, self.version, obj, sealed, what)
    }

    /// Seals a content-named metadata file (index, snapshot, dictionary): its id and
    /// bytes. Format 1 names it by the plain BLAKE3 of its sealed bytes; format 2 by the
    /// keyed BLAKE3 of its plaintext, bound into the seal, so that the name is checked
    /// whenever the file is opened.
    pub(crate) fn seal_named(&self, kind: Named, plain: &[u8]) -> (Id, Vec<u8>) {
        match self.version {
            Version::V1 => {
                let sealed = self.key.seal(plain);
                (Id::of_file(&sealed), sealed)
            }
            Version::V2 => {
                let id = self.key.blob_id(plain);
                let aad = kind.object(&id).aad();
                let sealed = match self.config.pad {
                    // An index file's size would give the number of blobs a backup added.
                    true => self.key.seal_ad(&format::pad(plain.to_vec()), &aad),
                    false => self.key.seal_ad(plain, &aad),
                };
                (id, sealed)
            }
        }
    }

    /// Opens the content-named file at `path` (see [`Self::seal_named`]). In format 2 its
    /// name must be the keyed hash of what it opens to: a renamed or substituted file is
    /// an error naming it. In format 1, a format-2 file is refused as one
    /// ([`Error::OtherFormat`]), not as damaged.
    pub(crate) fn open_named(&self, kind: Named, path: &str, sealed: Vec<u8>) -> Result<Vec<u8>> {
        match self.version {
            // A format-2 file (staged by `migrate`) is told apart from a damaged one.
            Version::V1 => match file_id(path) {
                Ok(id) => self.open_object(kind.object(&id), sealed, path),
                Err(_) => self.key.open_vec(sealed, path),
            },
            Version::V2 => {
                let id = file_id(path)?;
                let plain = self.open_object(kind.object(&id), sealed, path)?;
                self.named_plaintext(path, &id, plain)
            }
        }
    }

    /// [`Self::open_named`] of the file at `path` as just read from the store, without
    /// the copy of its bytes that telling why it does not open needs: only then is it read
    /// again (an index file can be tens of MB).
    pub(crate) fn open_named_read(
        &self,
        kind: Named,
        path: &str,
        sealed: Vec<u8>,
    ) -> Result<Vec<u8>> {
        let id = file_id(path)?;
        let ad = match self.version {
            Version::V1 => Vec::new(),
            Version::V2 => kind.object(&id).aad(),
        };
        match self.key.open_vec_ad(sealed, &ad, path) {
            Ok(plain) if self.version == Version::V1 => Ok(plain),
            Ok(plain) => self.named_plaintext(path, &id, plain),
            Err(Error::Tampered(_)) => self.open_named(kind, path, self.store.get(path)?),
            Err(e) => Err(e),
        }
    }

    /// A format-2 named file's plaintext, unpadded and checked against its name.
    fn named_plaintext(&self, path: &str, id: &Id, plain: Vec<u8>) -> Result<Vec<u8>> {
        let plain = match self.config.pad {
            true => format::unpad(plain, path)?,
            false => plain,
        };
        if self.key.blob_id(&plain) != *id {
            return Err(Error::corrupt(path, "content does not match its name"));
        }
        Ok(plain)
    }

    /// Checks a content-named file's bytes against its name: for packs and key files
    /// (and in format 1 every named file) the BLAKE3 of the bytes, in format 2 for
    /// index, snapshot and dictionary files that it opens under its name.
    pub(crate) fn verify_name(&self, path: &str, bytes: &[u8]) -> Result<()> {
        let named = match path.split('/').next() {
            Some("index") => Some(Named::Index),
            Some("snapshots") => Some(Named::Snapshot),
            Some("dicts") => Some(Named::Dictionary),
            Some("search") => Some(Named::Search),
            Some("audit") => Some(Named::Audit),
            _ => None,
        };
        match (self.version, named) {
            (Version::V2, Some(kind)) => self.open_named(kind, path, bytes.to_vec()).map(|_| ()),
            _ => match file_id(path)? == Id::of_file(bytes) {
                true => Ok(()),
                false => {
                    // A format-2 file in a format-1 repository says so.
                    if let Some(kind) = named {
                        if let Err(e @ Error::OtherFormat { .. }) =
                            self.open_named(kind, path, bytes.to_vec())
                        {
                            return Err(e);
                        }
                    }
                    Err(Error::corrupt(
                        path,
                        "content does not match its name: the file is damaged",
                    ))
                }
            },
        }
    }
}

/// The content-named metadata files: their directory decides the object they are sealed
/// as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Named {
    Index,
    Snapshot,
    Dictionary,
    /// `forgotten/<id>` ([`crate::repo::forgotten`]).
    Forgotten,
    /// `search/<id>`: a split of the search index ([`crate::search`]).
    Search,
    /// `audit/<id>`: a batch of the web UI's audit events ([`crate::repo::audit`]).
    Audit,
}

impl Named {
    fn object(self, id: &Id) -> Object<'_> {
        match self {
            Named::Index => Object::Index(id),
            Named::Snapshot => Object::Snapshot(id),
            Named::Dictionary => Object::Dictionary(id),
            Named::Forgotten => Object::Forgotten(id),
            Named::Search => Object::Search(id),
            Named::Audit => Object::Audit(id),
        }
    }
}

/// The sealed bytes of `config`: format 2 seals it as [`Object::Config`], format 1
/// without associated data.
pub(crate) fn seal_config(key: &MasterKey, config: &Config) -> Result<Vec<u8>> {
    let version = Version::from_number(config.version)?;
    let mut json =
        serde_json::to_vec(config).map_err(|e| Error::corrupt("config", e.to_string()))?;
    if version == Version::V2 {
        // Padded to a fixed length: the config's size would tell the compression and the
        // padding flag.
        json.push(0x80);
        json.resize(json.len().max(CONFIG_PADDED_LEN), 0);
    }
    Ok(seal_as(key, version, Object::Config, &json))
}

/// The plaintext length of a format-2 config (unless the JSON is longer).
pub(crate) const CONFIG_PADDED_LEN: usize = 1024;

/// Opens `config` and tells its format: sealed as [`Object::Config`] it is format 2 or
/// later (a later one is refused by its number), sealed without associated data format
/// 1. The version it states must agree with how it was sealed.
pub(crate) fn open_config(key: &MasterKey, sealed: Vec<u8>) -> Result<(Config, Version)> {
    let parse = |plain: &[u8]| -> Result<Config> {
        serde_json::from_slice(plain).map_err(|e| Error::corrupt("config", e.to_string()))
    };
    let opened = key.open_vec_ad(sealed.clone(), &Object::Config.aad(), "config");
    let (config, sealed_as) = match opened {
        Ok(plain) => (parse(&format::unpad(plain, "config")?)?, Version::V2),
        Err(_) => (parse(&key.open_vec(sealed, "config")?)?, Version::V1),
    };
    let version = Version::from_number(config.version)?;
    if version != sealed_as {
        return Err(Error::corrupt(
            "config",
            format!(
                "states format {} but is sealed as format {sealed_as}",
                config.version
            ),
        ));
    }
    Ok((config, version))
}

/// [`open_config`] for the fuzz target `config`; not an API.
#[doc(hidden)]
pub fn open_config_for_fuzz(key: &MasterKey, sealed: Vec<u8>) -> Result<(Config, Version)> {
    open_config(key, sealed)
}
