//! The nearest codes a scan has seen so far.

/// The `count` nearest so far (and up to as many more, dropped a batch at a
/// time); `bound`: what a code must beat to get in (one compare per code for
/// all the others). Slots are offered counted from `first` (a chunk's first
/// slot) and kept whole. Distances are small integers, so entries are
/// counted per distance and the farthest dropped by those counts: a heap
/// of the first plane's 4,096 spent more on its pushes than the scan on
/// its reads (`benches/sign_scan.rs`).
pub(super) struct Kept {
    found: Vec<(u32, usize)>,
    /// Entries of `found` at each distance.
    at: Vec<u32>,
    count: usize,
    pub(super) bound: u32,
    pub(super) first: usize,
}

impl Kept {
    /// For codes of `words` words.
    pub(super) fn new(count: usize, words: usize) -> Self {
        Kept {
            found: Vec::with_capacity(2 * count),
            at: vec![0; 64 * words + 1],
            count,
            bound: u32::MAX,
            first: 0,
        }
    }

    /// Keep `first + slot` at distance `d` if it is among the nearest so far
    /// and live.
    #[inline(always)]
    pub(super) fn offer(&mut self, d: u32, slot: usize, live: &impl Fn(usize) -> bool) {
        let slot = self.first + slot;
        if d < self.bound && live(slot) {
            self.push(d, slot);
        }
    }

    /// `offer` each of a block's distances, the first one's slot `first`.
    #[inline(always)]
    pub(super) fn offer_block(&mut self, d: &[u64], first: usize, live: &impl Fn(usize) -> bool) {
        for (k, &d) in d.iter().enumerate() {
            self.offer(d as u32, first + k, live);
        }
    }

    fn push(&mut self, d: u32, slot: usize) {
        self.found.push((d, slot));
        self.at[d as usize] += 1;
        if self.found.len() >= 2 * self.count {
            self.tighten();
        }
    }

    /// Only the `count` nearest left, the first offered of those tied at
    /// the farthest (a scan offers in slot order), and the bound there.
    fn tighten(&mut self) {
        let (mut nearer, mut far) = (0usize, 0usize);
        while nearer + (self.at[far] as usize) < self.count {
            nearer += self.at[far] as usize;
            far += 1;
        }
        let mut ties = self.count - nearer;
        let far = far as u32;
        self.found.retain(|&(d, _)| {
            let tie = d == far && ties > 0;
            ties -= usize::from(tie);
            d < far || tie
        });
        self.at[far as usize] = (self.count - nearer) as u32;
        self.at[far as usize + 1..].fill(0);
        self.bound = far;
    }

    pub(super) fn slots(self) -> Vec<(u32, usize)> {
        self.found
    }
}
