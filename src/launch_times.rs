//! [`LaunchTimes`]: the launch times of one partition size, in launch order, held compactly. A
//! calibration keeps every sample it measured (design rule 1 rests on them, and bundles carry
//! them), and a daemon keeps every calibration in memory: measured at every size, one kernel is
//! about 5,400 times, 43 KB as `u64`s, so 1,000 kernels were 43 MB of a 56 MB daemon. Times of one
//! size differ little from one launch to the next, so each is stored as the zigzag varint of its
//! difference from the one before: about 2 bytes a time on the simulator (`bfs`: 10,281 bytes
//! for 5,400 times). Lossless, and the stored file is unchanged: serialised as the plain array of
//! nanoseconds it always was.

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Launch times in nanoseconds, in launch order, delta- and varint-encoded.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct LaunchTimes {
    bytes: Vec<u8>,
    len: usize,
    /// The last time pushed: the base of the next difference.
    last: u64,
}

impl LaunchTimes {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn push(&mut self, t: u64) {
        let d = t.wrapping_sub(self.last) as i64;
        let mut z = ((d << 1) ^ (d >> 63)) as u64;
        while z >= 0x80 {
            self.bytes.push((z as u8) | 0x80);
            z >>= 7;
        }
        self.bytes.push(z as u8);
        self.last = t;
        self.len += 1;
    }

    pub fn extend_from_slice(&mut self, times: &[u64]) {
        self.bytes.reserve(times.len() * 2);
        for &t in times {
            self.push(t);
        }
    }

    /// The times, in launch order.
    pub fn iter(&self) -> Iter<'_> {
        Iter {
            bytes: &self.bytes,
            last: 0,
        }
    }

    pub fn to_vec(&self) -> Vec<u64> {
        let mut v = Vec::with_capacity(self.len);
        v.extend(self.iter());
        v
    }

    pub fn max(&self) -> Option<u64> {
        self.iter().max()
    }

    /// Give back what growing left over (a finished record is never pushed to again).
    pub fn shrink_to_fit(&mut self) {
        self.bytes.shrink_to_fit();
    }
}

impl From<&[u64]> for LaunchTimes {
    fn from(times: &[u64]) -> Self {
        let mut out = LaunchTimes::new();
        out.extend_from_slice(times);
        out.shrink_to_fit();
        out
    }
}

impl From<Vec<u64>> for LaunchTimes {
    fn from(times: Vec<u64>) -> Self {
        LaunchTimes::from(times.as_slice())
    }
}

impl FromIterator<u64> for LaunchTimes {
    fn from_iter<I: IntoIterator<Item = u64>>(iter: I) -> Self {
        let mut out = LaunchTimes::new();
        for t in iter {
            out.push(t);
        }
        out.shrink_to_fit();
        out
    }
}

/// Decodes [`LaunchTimes`] in launch order.
pub struct Iter<'a> {
    bytes: &'a [u8],
    last: u64,
}

impl Iterator for Iter<'_> {
    type Item = u64;

    fn next(&mut self) -> Option<u64> {
        let mut z = 0u64;
        let mut shift = 0;
        loop {
            let (&b, rest) = self.bytes.split_first()?;
            self.bytes = rest;
            z |= u64::from(b & 0x7f) << shift;
            if b < 0x80 {
                break;
            }
            shift += 7;
        }
        let d = ((z >> 1) as i64) ^ -((z & 1) as i64);
        self.last = self.last.wrapping_add(d as u64);
        Some(self.last)
    }
}

impl<'a> IntoIterator for &'a LaunchTimes {
    type Item = u64;
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl std::fmt::Debug for LaunchTimes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl Serialize for LaunchTimes {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_seq(self.iter())
    }
}

impl<'de> Deserialize<'de> for LaunchTimes {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visitor;
        impl<'de> serde::de::Visitor<'de> for Visitor {
            type Value = LaunchTimes;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("an array of launch times in nanoseconds")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<LaunchTimes, A::Error> {
                let mut out = LaunchTimes::new();
                while let Some(t) = seq.next_element::<u64>()? {
                    out.push(t);
                }
                out.shrink_to_fit();
                Ok(out)
            }
        }
        d.deserialize_seq(Visitor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any times, however far apart (0 and u64::MAX included), come back exactly, in order,
        /// through memory and through JSON.
        #[test]
        fn times_come_back_exactly(times in proptest::collection::vec(prop_oneof![any::<u64>(), 40_000u64..60_000], 0..400)) {
            let held = LaunchTimes::from(times.clone());
            prop_assert_eq!(held.len(), times.len());
            prop_assert_eq!(held.to_vec(), times.clone());
            prop_assert_eq!(held.max(), times.iter().copied().max());
            let json = serde_json::to_string(&held).unwrap();
            prop_assert_eq!(&json, &serde_json::to_string(&times).unwrap());
            let back: LaunchTimes = serde_json::from_str(&json).unwrap();
            prop_assert_eq!(back, held);
        }
    }

    #[test]
    fn close_times_take_about_two_bytes() {
        let times: Vec<u64> = (0..5400u64).map(|i| 50_000 + (i * 7919) % 1500).collect();
        let held = LaunchTimes::from(times);
        assert!(
            held.bytes.len() <= 2 * 5400 + 3,
            "{} bytes",
            held.bytes.len()
        );
    }
}
