//! Sealing an object of the repository with the key, as its format says: format 1
//! without associated data, format 2 binding the object's kind and name
//! ([`Object::aad`]), and on opening, telling an object of the other format or of
//! another place from a damaged one.

use crate::error::{Error, Result};
use crate::repo::crypto::MasterKey;
use crate::repo::format::{Object, Version};

/// Seals `plain` as `obj` of format `version`.
pub(crate) fn seal_as(key: &MasterKey, version: Version, obj: Object, plain: &[u8]) -> Vec<u8> {
    match version {
        Version::V1 => key.seal(plain),
        Version::V2 => key.seal_ad(plain, &obj.aad()),
    }
}

/// [`Repository::open_object`] for a given key and format.
pub(crate) fn open_as(
    key: &MasterKey,
    version: Version,
    obj: Object,
    sealed: Vec<u8>,
    what: &str,
) -> Result<Vec<u8>> {
    match version {
        Version::V1 => match key.open_vec(sealed.clone(), what) {
            Err(Error::Tampered(_)) if key.opens_with(&sealed, &obj.aad()) => {
                Err(Error::OtherFormat {
                    what: what.into(),
                    found: 2,
                    expected: 1,
                })
            }
            other => other,
        },
        Version::V2 => match key.open_vec_ad(sealed.clone(), &obj.aad(), what) {
            Err(Error::Tampered(_)) if key.opens_with(&sealed, &[]) => Err(Error::OtherFormat {
                what: what.into(),
                found: 1,
                expected: 2,
            }),
            Err(Error::Tampered(_)) => Err(Error::Misplaced {
                what: what.into(),
                expected: obj.describe(),
            }),
            other => other,
        },
    }
}
