//! Quorum arithmetic: a cluster of n voting members needs ⌊n/2⌋+1 ready members (seeds/004 ~7884).

use serde::Serialize;

/// Quorum of one Etcd.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Quorum {
    /// Voting members the cluster should have.
    pub members: u32,
    /// Members that are ready.
    pub ready: u32,
    /// Ready members needed for quorum (⌊n/2⌋+1; 0 for an empty cluster).
    pub needed: u32,
    /// How many more members may fail before quorum is lost (0 when already lost).
    pub tolerable_failures: u32,
    /// Whether the cluster has quorum.
    pub quorate: bool,
}

impl Quorum {
    /// Quorum of `members` voting members of which `ready` are ready.
    pub fn of(members: u32, ready: u32) -> Quorum {
        let ready = ready.min(members);
        let needed = if members == 0 { 0 } else { members / 2 + 1 };
        let quorate = members > 0 && ready >= needed;
        let tolerable_failures = if quorate { ready - needed } else { 0 };
        Quorum { members, ready, needed, tolerable_failures, quorate }
    }
    /// Failures a fully healthy cluster of this size tolerates.
    pub fn design_tolerance(&self) -> u32 {
        if self.members == 0 { 0 } else { self.members - self.needed }
    }
}

#[cfg(test)]
mod tests {
    use super::Quorum;

    #[test]
    fn quorum_table() {
        // (members, ready) -> (needed, tolerable, quorate)
        let cases = [
            (1, 1, 1, 0, true),
            (1, 0, 1, 0, false),
            (3, 3, 2, 1, true),
            (3, 2, 2, 0, true),
            (3, 1, 2, 0, false),
            (5, 5, 3, 2, true),
            (5, 3, 3, 0, true),
            (5, 2, 3, 0, false),
            (4, 3, 3, 0, true),
            (4, 2, 3, 0, false),
            (0, 0, 0, 0, false),
        ];
        for (n, r, needed, tol, quorate) in cases {
            let q = Quorum::of(n, r);
            assert_eq!((q.needed, q.tolerable_failures, q.quorate), (needed, tol, quorate), "n={n} ready={r}");
        }
        assert_eq!(Quorum::of(5, 5).design_tolerance(), 2);
        assert_eq!(Quorum::of(3, 9).ready, 3, "ready is capped at the member count");
    }
}
