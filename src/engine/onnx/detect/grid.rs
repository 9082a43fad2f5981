//! The places of a detector's feature maps: at each stride the input is
//! cut into cells, each with a few anchors, counted row by row, the anchors
//! of a cell one after another (the order every family here writes its
//! outputs in).

/// One feature map: its stride in input pixels, its cells, the anchors of
/// each cell.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Level {
    pub stride: usize,
    pub cols: usize,
    pub rows: usize,
    pub anchors: usize,
}

impl Level {
    /// The level of `stride` over an input of `size`: as many cells as
    /// cover it (a partial cell at the edge counts).
    pub fn new(stride: usize, (w, h): (usize, usize), anchors: usize) -> Self {
        Level {
            stride,
            cols: w.div_ceil(stride),
            rows: h.div_ceil(stride),
            anchors,
        }
    }

    /// Its candidates.
    pub fn count(&self) -> usize {
        self.cols * self.rows * self.anchors
    }

    /// Candidate `i`'s cell: (column, row).
    pub fn cell(&self, i: usize) -> (f32, f32) {
        let place = i / self.anchors;
        ((place % self.cols) as f32, (place / self.cols) as f32)
    }
}

/// The levels of `strides` over `size`, `anchors` each.
pub fn levels(strides: &[usize], size: (usize, usize), anchors: usize) -> Vec<Level> {
    strides
        .iter()
        .map(|&s| Level::new(s, size, anchors))
        .collect()
}

/// "8/16/32" for messages.
pub fn strides_text(levels: &[Level]) -> String {
    let strides: Vec<String> = levels.iter().map(|l| l.stride.to_string()).collect();
    strides.join("/")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_go_row_by_row_with_their_anchors_together() {
        let level = Level::new(8, (32, 16), 2);
        assert_eq!((level.cols, level.rows, level.count()), (4, 2, 16));
        assert_eq!(level.cell(0), (0.0, 0.0));
        assert_eq!(level.cell(1), (0.0, 0.0));
        assert_eq!(level.cell(2), (1.0, 0.0));
        assert_eq!(level.cell(9), (0.0, 1.0));
        assert_eq!(Level::new(32, (100, 100), 1).count(), 16);
    }
}
