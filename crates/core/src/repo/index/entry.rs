//! One blob's place ([`Location`]) and an entry of the index's sorted array ([`Entry`]):
//! what the in-memory index and its table (`super::table`) share.

use crate::repo::compress::Codec;
use crate::repo::format::BlobKind;
use crate::repo::id::Id;
use crate::repo::pack::PackEntry;

/// Where a blob is: 18 bytes, packed without padding (the index holds one per blob).
/// Its fields are read by value (`loc.offset`); a reference to one does not compile.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C, packed)]
pub struct Location {
    /// Position in [`super::Index::packs`].
    pub pack: u32,
    pub offset: u32,
    pub stored_len: u32,
    pub raw_len: u32,
    pub kind: BlobKind,
    pub codec: Codec,
}

impl Location {
    pub(super) fn of(pack: u32, e: &PackEntry) -> Location {
        Location {
            pack,
            offset: e.offset,
            stored_len: e.stored_len,
            raw_len: e.raw_len,
            kind: e.kind,
            codec: e.codec,
        }
    }
}

/// One blob in the sorted array: 50 bytes, alignment 1.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    pub(super) id: Id,
    pub(super) loc: Location,
}

const _: () = assert!(std::mem::size_of::<Entry>() == 50);
