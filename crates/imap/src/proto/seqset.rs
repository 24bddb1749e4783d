//! Sequence sets (`1:5,7,9:*`) for UID FETCH/SEARCH and APPENDUID.

use std::fmt;

/// A set of UIDs or sequence numbers as inclusive ranges. `u32::MAX` is
/// written as `*` (the largest number in the mailbox).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SeqSet {
    ranges: Vec<(u32, u32)>,
}

/// `*` in a sequence set.
pub const STAR: u32 = u32::MAX;

impl SeqSet {
    /// The empty set (not valid on the wire; check [`is_empty`](Self::is_empty)).
    pub fn new() -> Self {
        SeqSet::default()
    }

    /// `from:to` (order does not matter on the wire).
    pub fn range(from: u32, to: u32) -> Self {
        SeqSet {
            ranges: vec![(from.min(to), from.max(to))],
        }
    }

    /// `from:*`: everything from `from` on. Note that the server's `*` is the
    /// highest UID present, so `n:*` matches that message even when it is
    /// below `n`: filter results.
    pub fn starting_at(from: u32) -> Self {
        SeqSet::range(from, STAR)
    }

    /// `1:*`.
    pub fn all() -> Self {
        SeqSet::starting_at(1)
    }

    /// A compact set of the given numbers (sorted and merged into ranges).
    pub fn from_ids(ids: &[u32]) -> Self {
        let mut v: Vec<u32> = ids.to_vec();
        v.sort_unstable();
        v.dedup();
        let mut ranges: Vec<(u32, u32)> = Vec::new();
        for id in v {
            match ranges.last_mut() {
                Some(last) if last.1.checked_add(1) == Some(id) => last.1 = id,
                _ => ranges.push((id, id)),
            }
        }
        SeqSet { ranges }
    }

    /// Adds `from:to`.
    pub fn push_range(&mut self, from: u32, to: u32) {
        self.ranges.push((from.min(to), from.max(to)));
    }

    /// The ranges, inclusive.
    pub fn ranges(&self) -> &[(u32, u32)] {
        &self.ranges
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.ranges.is_empty()
    }

    /// Number of members if there is no `*`, counting overlaps twice.
    pub fn len(&self) -> u64 {
        self.ranges.iter().map(|&(a, b)| u64::from(b - a) + 1).sum()
    }

    /// Whether `n` is in the set.
    pub fn contains(&self, n: u32) -> bool {
        self.ranges.iter().any(|&(a, b)| (a..=b).contains(&n))
    }

    /// The members in wire order, if there are at most `max` of them (a guard
    /// against a hostile `1:4294967295`).
    pub fn expand(&self, max: usize) -> Option<Vec<u32>> {
        if self.len() > max as u64 {
            return None;
        }
        Some(self.ranges.iter().flat_map(|&(a, b)| a..=b).collect())
    }

    /// Parses `1:5,7,9:*`.
    pub fn parse(s: &str) -> Option<SeqSet> {
        let num = |t: &str| -> Option<u32> {
            if t == "*" {
                Some(STAR)
            } else if !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit()) {
                t.parse().ok().filter(|&n| n > 0)
            } else {
                None
            }
        };
        let mut set = SeqSet::new();
        for part in s.split(',') {
            match part.split_once(':') {
                Some((a, b)) => set.push_range(num(a)?, num(b)?),
                None => {
                    let n = num(part)?;
                    set.push_range(n, n);
                }
            }
        }
        Some(set)
    }
}

impl fmt::Display for SeqSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = |x: u32, f: &mut fmt::Formatter<'_>| {
            if x == STAR {
                f.write_str("*")
            } else {
                write!(f, "{x}")
            }
        };
        for (i, &(a, b)) in self.ranges.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            n(a, f)?;
            if b != a {
                f.write_str(":")?;
                n(b, f)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compact_and_parse() {
        let s = SeqSet::from_ids(&[7, 1, 2, 3, 9, 10, 3]);
        assert_eq!(s.to_string(), "1:3,7,9:10");
        assert_eq!(SeqSet::parse("1:3,7,9:10"), Some(s.clone()));
        assert_eq!(s.expand(10), Some(vec![1, 2, 3, 7, 9, 10]));
        assert_eq!(SeqSet::starting_at(5).to_string(), "5:*");
        assert_eq!(SeqSet::parse("3955:3957"), Some(SeqSet::range(3955, 3957)));
        assert_eq!(SeqSet::parse("1:*").map(|s| s.expand(5)), Some(None));
        assert_eq!(SeqSet::parse("0"), None);
        assert_eq!(SeqSet::parse("1,,2"), None);
    }
}
