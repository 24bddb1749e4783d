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
