use super::*;
use proptest::prelude::*;
use std::collections::HashMap;
use std::path::Path;

fn entry(i: u8) -> PackEntry {
    PackEntry {
        id: Id([i; 32]),
        kind: BlobKind::Data,
        codec: Codec::Zstd,
        offset: i as u32 * 7,
        stored_len: 99,
        raw_len: 123,
    }
}

fn pack(id: u8, version: Version, entries: Vec<PackEntry>) -> IndexedPack {
    IndexedPack {
        id: Id([id; 32]),
        version,
        entries,
    }
}

#[test]
fn golden_layout() {
    let enc = encode(&[pack(0xaa, Version::V1, vec![entry(1)])], Version::V1).unwrap();
    assert_eq!(&enc[..9], b"MVIX\x01\x01\x00\x00\x00");
    assert_eq!(enc.len(), 9 + 36 + 46);
    assert_eq!(&enc[45..47], &[0, 1]);
    let enc = encode(&[pack(0xaa, Version::V1, vec![entry(1)])], Version::V2).unwrap();
    assert_eq!(&enc[..9], b"MVIX\x02\x01\x00\x00\x00");
    assert_eq!(enc.len(), 9 + 37 + 46);
    assert_eq!(enc[41], 1, "the pack's own format");
    assert_eq!(&enc[46..48], &[0, 1]);
    // A format-1 index cannot list a format-2 pack; a version byte must match.
    assert!(encode(&[pack(1, Version::V2, vec![])], Version::V1).is_err());
    assert!(decode(&enc, Version::V1, "t").is_err());
}

proptest! {
    #[test]
    fn round_trip(packs in proptest::collection::vec((any::<[u8; 32]>(), any::<bool>(), proptest::collection::vec(any::<u8>(), 0..20)), 0..8)) {
        for v in [Version::V1, Version::V2] {
            let packs: Vec<IndexedPack> = packs.iter().map(|(p, two, es)| IndexedPack {
                id: Id(*p),
                version: if *two && v == Version::V2 { Version::V2 } else { Version::V1 },
                entries: es.iter().copied().map(entry).collect(),
            }).collect();
            let enc = encode(&packs, v).unwrap();
            prop_assert_eq!(decode(&enc, v, "t").unwrap(), packs);
            prop_assert!(decode(&enc[..enc.len() - 1], v, "t").is_err());
        }
    }

    #[test]
    fn decode_never_panics(data in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = decode(&data, Version::V1, "t");
        let _ = decode(&data, Version::V2, "t");
    }
}

/// An id whose first two bytes are `prefix` and whose last eight are `n`.
fn id_of(prefix: u16, n: u64) -> Id {
    let mut b = [0x5a; 32];
    b[..2].copy_from_slice(&prefix.to_be_bytes());
    b[24..].copy_from_slice(&n.to_be_bytes());
    Id(b)
}

/// A pseudo-random id (splitmix64 of `n`), spread like the keyed hashes blob ids are.
fn random_id(n: u64) -> Id {
    let mut b = [0u8; 32];
    let mut x = n;
    for chunk in b.chunks_mut(8) {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        chunk.copy_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    Id(b)
}

fn entry_at(id: Id, offset: u32) -> PackEntry {
    PackEntry {
        id,
        // Both kinds: a table holds its trees in memory, its data blobs in blocks.
        kind: match id.0[31] % 2 {
            0 => BlobKind::Data,
            _ => BlobKind::Tree,
        },
        codec: Codec::Raw,
        offset,
        stored_len: offset + 1,
        raw_len: offset + 2,
    }
}

/// The plaintext of a format-2 index file listing `packs` (pack id byte, entries).
fn file(packs: &[(u8, Vec<PackEntry>)]) -> Vec<u8> {
    let packs: Vec<IndexedPack> = (packs.iter())
        .map(|(p, es)| pack(*p, Version::V2, es.clone()))
        .collect();
    encode(&packs, Version::V2).unwrap()
}

/// An index loaded from the plaintexts of `files`, in that order.
fn load(files: &[Vec<u8>]) -> Index {
    let mut loader = Loader::default();
    for f in files {
        loader
            .add_file(f.clone(), Version::V2, "t", &[Version::V2])
            .unwrap();
    }
    loader.finish()
}

/// An index loaded with a table in `dir`: `first` into a table of their own, then
/// `rest` beside it, made a table with it from `at` blobs on (then in runs of 7).
fn load_tabled(dir: &Path, first: &[Vec<u8>], rest: &[Vec<u8>], at: usize) -> Index {
    let target = dir.join("t.table");
    let load_into = |base: Option<table::Table>, files: &[Vec<u8>], at: usize| {
        let mut loader = Loader::with_table(base, dir, &target, false, 0);
        let plan = loader.table.as_mut().unwrap();
        // Spilled entries always go to a table: runs only when one is made anyway.
        (plan.at, plan.run) = (at, if at == usize::MAX { usize::MAX } else { 7 });
        for f in files {
            (loader.add_file(f.clone(), Version::V2, "t", &[Version::V2])).unwrap();
            loader.spill_if_full().unwrap();
        }
        loader.finish_table(Vec::new()).unwrap()
    };
    let index = load_into(None, first, 0);
    assert!(
        index.in_table() == index.len(),
        "the first files in a table"
    );
    drop(index);
    match target.exists() {
        true => load_into(Some(table::Table::open(&target).unwrap()), rest, at),
        // No blob, no table: the next open reads every file again.
        false => load_into(None, &[first, rest].concat(), at),
    }
}

/// The pack id byte and offset `id` is found at.
fn at(index: &Index, id: &Id) -> Option<(u8, u32)> {
    let loc = index.get(id)?;
    Some((index.pack_id(loc.pack).0[0], loc.offset))
}

#[test]
fn a_location_is_18_bytes() {
    assert_eq!(std::mem::size_of::<Location>(), 18);
    assert_eq!(std::mem::align_of::<Location>(), 1);
}

#[test]
fn empty_index() {
    for index in [
        Index::default(),
        Loader::default().finish(),
        load(&[file(&[])]),
    ] {
        for id in [Id([0; 32]), Id([0xff; 32]), random_id(1)] {
            assert!(index.get(&id).is_none());
            assert!(!index.contains(&id));
        }
        assert_eq!((index.len(), index.is_empty()), (0, true));
        assert_eq!(index.iter().count(), 0);
    }
}

#[test]
fn lookup_finds_every_loaded_blob_and_nothing_else() {
    let ids: Vec<Id> = (0..20_000).map(random_id).collect();
    let packs: Vec<(u8, Vec<PackEntry>)> = (ids.chunks(1000).enumerate())
        .map(|(p, c)| {
            (
                p as u8,
                (c.iter().zip(0..))
                    .map(|(id, o)| entry_at(*id, o))
                    .collect(),
            )
        })
        .collect();
    let index = load(&[file(&packs[..7]), file(&packs[7..])]);
    assert_eq!(index.bits, 13, "two to four blobs a bucket");
    assert_eq!(index.len(), ids.len());
    for (n, id) in ids.iter().enumerate() {
        assert_eq!(at(&index, id), Some(((n / 1000) as u8, (n % 1000) as u32)));
        let loc = index.get(id).unwrap();
        assert_eq!(
            (loc.stored_len, loc.raw_len),
            (loc.offset + 1, loc.offset + 2)
        );
        assert_eq!((loc.kind, loc.codec), (entry_at(*id, 0).kind, Codec::Raw));
    }
    for n in 20_000..40_000 {
        assert!(!index.contains(&random_id(n)));
    }
}

#[test]
fn ids_sharing_their_first_16_bits() {
    // Whole buckets of ids that differ only past the prefix, at both ends of the range
    // and next to each other, among random ones that fill the table to 16 bits.
    let mut ids: Vec<Id> = (0..300_000).map(random_id).collect();
    for prefix in [0x0000, 0x0001, 0x7fff, 0x8000, 0xfffe, 0xffff] {
        ids.extend((0..40).map(|n| id_of(prefix, n * 2)));
    }
    ids.push(Id([0; 32]));
    ids.push(Id([0xff; 32]));
    let entries: Vec<PackEntry> = (ids.iter().zip(0..))
        .map(|(id, o)| entry_at(*id, o))
        .collect();
    let index = load(&[file(&[(1, entries)])]);
    assert_eq!(index.bits, 16);
    for (id, o) in ids.iter().zip(0..) {
        assert_eq!(at(&index, id), Some((1, o)), "{id:?}");
    }
    for prefix in [0x0000, 0x0001, 0x7fff, 0x8000, 0xfffe, 0xffff] {
        for n in 0..40 {
            assert!(!index.contains(&id_of(prefix, n * 2 + 1)));
        }
        assert!(!index.contains(&id_of(prefix, 1000)));
    }
}

#[test]
fn blobs_added_go_to_the_overlay_and_are_folded_in() {
    let loaded: Vec<Id> = (0..100).map(random_id).collect();
    let es = (loaded.iter().zip(0..))
        .map(|(id, o)| entry_at(*id, o))
        .collect();
    let mut index = load(&[file(&[(1, es)])]);
    let added: Vec<Id> = (1000..1000 + FOLD_AT as u64 + 5).map(random_id).collect();
    let mut folded = false;
    for (p, chunk) in added.chunks(1000).enumerate() {
        let es: Vec<PackEntry> = (chunk.iter().zip(0..))
            .map(|(id, o)| entry_at(*id, o))
            .collect();
        let before = index.overlay.len();
        index.add_pack(Id([10 + p as u8; 32]), Version::V2, &es);
        folded |= index.overlay.len() < before + es.len();
        // Every blob is found, whether in the array or in the overlay.
        let n = p * 1000 + chunk.len();
        assert_eq!(index.len(), 100 + n);
        assert!(added[..n].iter().all(|id| index.contains(id)));
        assert!(loaded
            .iter()
            .all(|id| at(&index, id).is_some_and(|(p, _)| p == 1)));
    }
    assert!(folded, "the overlay was folded");
    assert!(
        index.overlay.is_empty(),
        "folded when it held more than FOLD_AT"
    );
    let late: Vec<PackEntry> = (0..5)
        .map(|n| entry_at(random_id(100_000 + n), 7))
        .collect();
    index.add_pack(Id([99; 32]), Version::V2, &late);
    assert_eq!(index.overlay.len(), 5);
    assert!(late.iter().all(|e| at(&index, &e.id) == Some((99, 7))));
    assert!(index.sorted.windows(2).all(|w| w[0].id < w[1].id));
    for (n, id) in added.iter().enumerate() {
        assert_eq!(
            at(&index, id),
            Some((10 + (n / 1000) as u8, (n % 1000) as u32))
        );
    }
    assert!(!index.contains(&random_id(999)));
}

#[test]
fn iter_covers_the_array_and_the_overlay_once() {
    let es = (0..50).map(|n| entry_at(random_id(n), n as u32)).collect();
    let mut index = load(&[file(&[(1, es)])]);
    let added: Vec<PackEntry> = (40..80).map(|n| entry_at(random_id(n), n as u32)).collect();
    index.add_pack(Id([2; 32]), Version::V2, &added);
    assert_eq!(index.overlay.len(), 30);
    let mut seen: Vec<(Id, u32)> = index.iter().map(|(id, l)| (id, l.offset)).collect();
    seen.sort();
    let mut want: Vec<(Id, u32)> = (0..80).map(|n| (random_id(n), n as u32)).collect();
    want.sort();
    assert_eq!(seen, want);
    assert_eq!(index.len(), 80);
}

#[test]
fn the_first_location_wins_in_load_order_and_after() {
    let (a, b, c, d) = (random_id(1), random_id(2), random_id(3), random_id(4));
    let index = load(&[
        // Pack 9 is seen first, without `b`.
        file(&[(9, vec![entry_at(a, 0)])]),
        // `b` is first listed in pack 5, then again in pack 9; `c` twice in one pack,
        // its later listing at a lower offset.
        file(&[
            (
                5,
                vec![entry_at(b, 100), entry_at(c, 300), entry_at(c, 200)],
            ),
            (9, vec![entry_at(b, 50), entry_at(a, 60)]),
        ]),
        file(&[(6, vec![entry_at(a, 70), entry_at(d, 80)])]),
    ]);
    assert_eq!(at(&index, &a), Some((9, 0)));
    assert_eq!(at(&index, &b), Some((5, 100)));
    assert_eq!(at(&index, &c), Some((5, 300)));
    assert_eq!(at(&index, &d), Some((6, 80)));
    assert_eq!(index.len(), 4);
    let mut index = index;
    let e = random_id(5);
    // Blobs added keep a loaded blob's location, and the first added one's.
    index.add_pack(Id([7; 32]), Version::V2, &[entry_at(a, 1), entry_at(e, 2)]);
    index.add_pack(Id([8; 32]), Version::V2, &[entry_at(e, 3), entry_at(d, 4)]);
    let check = |index: &Index| {
        assert_eq!(at(index, &a), Some((9, 0)));
        assert_eq!(at(index, &d), Some((6, 80)));
        assert_eq!(at(index, &e), Some((7, 2)));
        assert_eq!(index.len(), 5);
        assert_eq!(index.packs().len(), 5);
    };
    check(&index);
    index.fold();
    assert!(index.overlay.is_empty());
    check(&index);
    index.add_pack(Id([8; 32]), Version::V2, &[entry_at(e, 9)]);
    check(&index);
}

#[test]
fn a_file_that_does_not_load_adds_nothing() {
    let (a, b) = (random_id(1), random_id(2));
    let good = file(&[(1, vec![entry_at(a, 0)])]);
    let bad = file(&[(2, vec![entry_at(b, 0)]), (1, vec![entry_at(a, 9)])]);
    let mut loader = Loader::default();
    loader
        .add_file(good, Version::V2, "t", &[Version::V2])
        .unwrap();
    // Truncated after its first pack, or listing a pack of a format not held.
    assert!(loader
        .add_file(
            bad[..bad.len() - 1].to_vec(),
            Version::V2,
            "t",
            &[Version::V2]
        )
        .is_err());
    let mut v1 = bad.clone();
    v1[41] = 1;
    let err = loader
        .add_file(v1, Version::V2, "t", &[Version::V2])
        .unwrap_err();
    assert!(err.to_string().contains("does not hold"), "{err}");
    // A bad entry in the first pack, found after the last pack's entries were taken.
    let mut kind = file(&[
        (3, vec![entry_at(b, 0)]),
        (4, vec![entry_at(random_id(3), 0)]),
    ]);
    kind[46] = 9;
    let err = loader.add_file(kind, Version::V2, "t", &[Version::V2]);
    assert!(err.unwrap_err().to_string().contains("bad blob kind"));
    let index = loader.finish();
    assert!(!index.has_pack(&Id([4; 32])) && !index.contains(&random_id(3)));
    assert_eq!((index.len(), index.packs().len()), (1, 1));
    assert!(!index.has_pack(&Id([2; 32])));
    assert!(!index.contains(&b));
    assert_eq!(at(&index, &a), Some((1, 0)));
}

/// What [`Index`] must answer: a hash map where the first location added wins.
#[derive(Default)]
struct Model {
    packs: Vec<u8>,
    blobs: HashMap<Id, (u8, u32)>,
}

impl Model {
    fn add(&mut self, pack: u8, entries: &[PackEntry]) {
        if !self.packs.contains(&pack) {
            self.packs.push(pack);
        }
        for e in entries {
            self.blobs.entry(e.id).or_insert((pack, e.offset));
        }
    }
}

proptest! {
    #[test]
    fn answers_as_a_hash_map_would(
        files in proptest::collection::vec(
            proptest::collection::vec((0u8..6, proptest::collection::vec((0u16..4, 0u64..30, 0u32..50), 0..30)), 0..4),
            0..4),
        added in proptest::collection::vec((0u8..8, proptest::collection::vec((0u16..4, 0u64..30, 0u32..50), 0..30)), 0..6),
        how in 0u8..3,
        split in 0usize..5,
    ) {
        let to_entries = |es: &Vec<(u16, u64, u32)>| -> Vec<PackEntry> {
            es.iter().map(|(p, n, o)| entry_at(id_of(p << 14, *n), *o)).collect()
        };
        let mut model = Model::default();
        let mut plain = Vec::new();
        for f in &files {
            let packs: Vec<(u8, Vec<PackEntry>)> = f.iter().map(|(p, es)| (*p, to_entries(es))).collect();
            plain.push(file(&packs));
            for (p, es) in &packs {
                model.add(*p, es);
            }
        }
        let dir = tempfile::tempdir().unwrap();
        // In memory; the first files in a table and the rest in memory beside it; all
        // in a table made again with the rest (spilled in runs of 7).
        let split = split % (plain.len() + 1);
        let mut index = match how {
            0 => load(&plain),
            1 => load_tabled(dir.path(), &plain[..split], &plain[split..], usize::MAX),
            _ => load_tabled(dir.path(), &plain[..split], &plain[split..], 0),
        };
        for (i, (p, es)) in added.iter().enumerate() {
            index.add_pack(Id([*p; 32]), Version::V2, &to_entries(es));
            model.add(*p, &to_entries(es));
            if i % 2 == 1 {
                index.fold();
            }
        }
        for p in 0..4u16 {
            for n in 0..30 {
                let id = id_of(p << 14, n);
                prop_assert_eq!(at(&index, &id), model.blobs.get(&id).copied());
            }
        }
        prop_assert_eq!(index.len(), model.blobs.len());
        let packs: Vec<u8> = index.packs().iter().map(|p| p.0[0]).collect();
        prop_assert_eq!(packs, model.packs);
        let mut ids: Vec<Id> = index.iter().map(|(id, _)| id).collect();
        ids.sort();
        ids.dedup();
        prop_assert_eq!(ids.len(), model.blobs.len());
    }
}

#[test]
fn by_pack_gives_each_pack_its_blobs_from_the_array_and_the_overlay() {
    let a: Vec<PackEntry> = (0..50).map(|n| entry_at(random_id(n), n as u32)).collect();
    let b: Vec<PackEntry> = (50..60).map(|n| entry_at(random_id(n), n as u32)).collect();
    let mut index = load(&[file(&[(1, a), (3, b)])]);
    // Pack 2 repeats blobs of pack 1 (they stay there) and adds its own, in the overlay.
    let added: Vec<PackEntry> = (45..70).map(|n| entry_at(random_id(n), n as u32)).collect();
    index.add_pack(Id([2; 32]), Version::V2, &added);
    assert!(!index.overlay.is_empty());
    let by_pack = index.by_pack();
    let blobs = |pack: u8| -> Vec<u32> {
        let pos = index.pack_position_of(&Id([pack; 32])).unwrap();
        let mut offsets: Vec<u32> = (by_pack.blobs(pos))
            .map(|(id, loc)| {
                assert_eq!(index.get(&id), Some(loc));
                loc.offset
            })
            .collect();
        offsets.sort();
        offsets
    };
    assert_eq!(blobs(1), (0..50).collect::<Vec<_>>());
    assert_eq!(blobs(3), (50..60).collect::<Vec<_>>());
    assert_eq!(blobs(2), (60..70).collect::<Vec<_>>());
    assert!(index.pack_position_of(&Id([9; 32])).is_none());
    assert_eq!(by_pack.blobs(99).count(), 0);
}

#[test]
fn a_blob_set_holds_indexed_and_other_ids_once() {
    let es = (0..100).map(|n| entry_at(random_id(n), n as u32)).collect();
    let mut index = load(&[file(&[(1, es)])]);
    index.add_pack(Id([2; 32]), Version::V2, &[entry_at(random_id(500), 0)]);
    let mut set = BlobSet::new(&index);
    assert!(set.is_empty());
    for n in [3, 64, 99, 500, 1000] {
        assert!(!set.contains(&random_id(n)));
        assert!(set.insert(random_id(n)), "{n} new");
        assert!(set.contains(&random_id(n)));
        assert!(!set.insert(random_id(n)), "{n} not new");
    }
    assert_eq!(set.len(), 5);
    for n in [0, 2, 4, 63, 65, 98, 501] {
        assert!(!set.contains(&random_id(n)), "{n}");
    }
}

#[test]
fn a_table_answers_as_the_array_does_by_pack_and_in_a_blob_set() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<PackEntry> = (0..300).map(|n| entry_at(random_id(n), n as u32)).collect();
    let b: Vec<PackEntry> = (300..320)
        .map(|n| entry_at(random_id(n), n as u32))
        .collect();
    let c: Vec<PackEntry> = (310..340)
        .map(|n| entry_at(random_id(n), n as u32))
        .collect();
    let mut index = load_tabled(
        dir.path(),
        &[file(&[(1, a)])],
        &[file(&[(3, b)]), file(&[(4, c)])],
        usize::MAX,
    );
    assert_eq!((index.in_table(), index.len()), (300, 340));
    // Pack 2 repeats blobs of the table and of memory and adds its own, in the overlay.
    let added: Vec<PackEntry> = (290..360)
        .map(|n| entry_at(random_id(n), n as u32))
        .collect();
    index.add_pack(Id([2; 32]), Version::V2, &added);
    assert_eq!(index.len(), 360);
    assert_eq!(at(&index, &random_id(295)), Some((1, 295)));
    assert_eq!(at(&index, &random_id(315)), Some((3, 315)));
    assert_eq!(at(&index, &random_id(335)), Some((4, 335)));
    assert_eq!(at(&index, &random_id(355)), Some((2, 355)));
    let by_pack = index.by_pack();
    let offsets = |pack: u8| -> Vec<u32> {
        let pos = index.pack_position_of(&Id([pack; 32])).unwrap();
        let mut v: Vec<u32> = by_pack.blobs(pos).map(|(_, loc)| loc.offset).collect();
        v.sort();
        v
    };
    assert_eq!(offsets(1), (0..300).collect::<Vec<_>>());
    assert_eq!(offsets(3), (300..320).collect::<Vec<_>>());
    assert_eq!(offsets(4), (320..340).collect::<Vec<_>>());
    assert_eq!(offsets(2), (340..360).collect::<Vec<_>>());
    let mut set = BlobSet::new(&index);
    for n in [0, 299, 300, 339, 350, 1000] {
        assert!(set.insert(random_id(n)), "{n}");
        assert!(!set.insert(random_id(n)), "{n}");
    }
    assert_eq!(set.len(), 6);
    assert!(!set.contains(&random_id(1)) && !set.contains(&random_id(301)));
    assert!(index.damage().is_none());
}

#[test]
fn a_damaged_table_makes_its_blobs_absent_says_so_and_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let a: Vec<PackEntry> = (0..300).map(|n| entry_at(random_id(n), n as u32)).collect();
    let index = load_tabled(dir.path(), &[file(&[(1, a)])], &[], usize::MAX);
    assert!(index.contains(&random_id(7)));
    let data = |n: u64| entry_at(random_id(n), 0).kind == BlobKind::Data;
    let (a, b) = (
        (8..).find(|&n| data(n)).unwrap(),
        (9..).find(|&n| data(n) && n > 9).unwrap(),
    );
    // Every block's bytes flipped behind the open table's back.
    let target = dir.path().join("t.table");
    let mut bytes = std::fs::read(&target).unwrap();
    for b in &mut bytes[200..15_000] {
        *b ^= 0x55;
    }
    std::fs::write(&target, &bytes).unwrap();
    assert!(!index.contains(&random_id(a)));
    assert!(index.get(&random_id(b)).is_none());
    assert!(
        index.damage().is_some_and(|d| d.contains("checksum")),
        "{:?}",
        index.damage()
    );
    assert!(
        !target.exists(),
        "removed, so the next open reads the index files"
    );
    assert!(index.iter().count() < 300);
}
