use super::*;

#[test]
fn nearest_finds_the_closest_snapshot_inside_on_each_side() {
    let inside = [false, true, false, false, true, false];
    let m = u32::MAX;
    assert_eq!(nearest(&inside, false), vec![1, 1, 4, 4, 4, m]);
    assert_eq!(nearest(&inside, true), vec![m, 1, 1, 1, 4, 4]);
}
