use super::*;

#[test]
fn nearest_finds_the_closest_snapshot_inside_on_each_side() {
    let inside = [false, true, false, false, true, false];
    let m = u32::MAX;
    assert_eq!(nearest(&inside, false), vec![1, 1, 4, 4, 4, m]);
    assert_eq!(nearest(&inside, true), vec![m, 1, 1, 1, 4, 4]);
}

#[test]
fn tips_naming_records_the_map_does_not_have_are_damage() {
    use super::types::{ChunksOf, SeqTip, TipFolder};
    use crate::repo::tree::ChunkRef;
    let c = ChunkRef {
        entries: Id([1; 32]),
        names: Id([2; 32]),
    };
    let tip = SeqTip {
        folders: [(
            0u32,
            TipFolder {
                of: ChunksOf::Inline(vec![c]),
                chunks: vec![(c, vec![0, 5])],
            },
        )]
        .into_iter()
        .collect(),
    };
    let raw = postcard::to_stdvec(&vec![tip]).unwrap();
    assert!(Tips::from_raw(raw.clone()).decode(1, 5).is_err());
    let mut ok = Tips::from_raw(raw);
    assert_eq!(
        ok.decode(1, 6).unwrap()[0].folders[&0].chunks[0].1,
        vec![0, 5]
    );
}

/// A map of one host and source's snapshots 0..5 (`dead` forgotten) and records of
/// (content, folder, first, last).
fn map_of(dead: &[usize], recs: &[(u8, u32, u32, u32)]) -> Places {
    let mut p = Places::empty();
    p.seqs.push(types::Seq {
        hostname: "h".into(),
        source: "s".into(),
        snaps: (0..5)
            .map(|i| SnapHead {
                id: Id([i as u8 + 100; 32]),
                time: 1000 + i,
                nanos: 0,
            })
            .collect(),
        failures: Vec::new(),
        live: (0..5).map(|i| !dead.contains(&i)).collect(),
    });
    for &(c, f, a, b) in recs {
        p.cols.content.push(Id([c; 32]));
        p.cols.seq.push(0);
        p.cols.folder.push(f);
        p.cols.first.push(a);
        p.cols.last.push(b);
    }
    p.finish();
    p
}

/// Issue 28: a message is gone in the first later snapshot whose folder holds its content
/// in no record: a flag change (a new record) holds it on, a forgotten snapshot is passed
/// over, another folder does not hold it.
#[test]
fn a_message_is_gone_where_its_folder_first_no_longer_holds_it() {
    let p = map_of(
        &[3],
        &[
            (1, 0, 0, 1), // 0: a flag changed in 2...
            (1, 0, 2, 4), // 1: ...still there
            (2, 0, 0, 1), // 2: deleted in 2
            (2, 1, 2, 4), // 3: moved to folder 1 in 2
            (3, 0, 0, 2), // 4: gone in 3, forgotten: 4
            (4, 0, 0, 0), // 5: gone in 1, back in 2
            (4, 0, 2, 4), // 6
        ],
    );
    let time = |s: Option<&SnapHead>| s.map(|s| s.time);
    let at = |c: u8, f: u32, i: u32| time(p.gone_after(&Id([c; 32]), f, (0, i)));
    assert_eq!(time(p.gone_in(0)), None);
    assert_eq!(at(1, 0, 0), None);
    assert_eq!(time(p.gone_in(2)), Some(1002));
    assert_eq!(at(2, 0, 1), Some(1002));
    assert_eq!(at(2, 1, 2), None);
    assert_eq!(at(3, 0, 0), Some(1004));
    assert_eq!(at(4, 0, 0), Some(1001));
    assert_eq!(at(4, 0, 2), None);
    assert_eq!(at(4, 0, 1), None, "not held in 1: nothing known");
    assert_eq!(at(9, 0, 0), None, "no such content");
    assert_eq!(p.snapshot_at(&Id([102; 32])), Some((0, 2)));
    assert_eq!(p.snapshot_at(&Id([1; 32])), None);
}
