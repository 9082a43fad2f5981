//! `out = then(bias + w · x)`, the matrix product under our convolutions
//! (gemm_conv.rs): `w` is the kernel as `m × k` rows, `x` one image as
//! `k × n` (input channels, or channels and taps after im2col, × pixels),
//! `out` as `m × n`. Neither operand is repacked: a tile of `MR` output
//! channels × 16 pixels reads its 16 pixels of each input channel straight
//! from the image (rows are contiguous) and its `MR` weights as broadcasts
//! from the kernel's rows, so the loop is bound by the fused multiply-adds,
//! not by memory; tract instead repacks the image on every run (a tenth of
//! its time on these models). Two tiles: AVX-512, 8 channels × one 16-lane
//! vector; AVX2, 6 channels × two 8-lane vectors (the classic register
//! block). Where the CPU has two 512-bit FMA units (Intel servers), the
//! first can do twice the work per cycle; on Zen 4 the two run at one rate.

use super::window::ConvWeights;
use super::Then;

/// Output channels per tile, the most of either tile.
const MAX_MR: usize = 8;
/// Pixels per tile.
const NR: usize = 16;
/// Input channels per pass: 256 rows of a 16-pixel tile (16 KiB) stay in L1
/// while every output channel's tile reads them; larger `k` is summed in
/// passes over `out`.
const KC: usize = 256;
/// Values of the image a pass reads for every output channel before moving
/// on (256 KiB: in L2 while the channels' tiles read it).
const CHUNK: usize = 65536;

/// One product's weights (the kernel as `m × k`; bias and slopes checked
/// against `m` by `ConvInputs::weights`) and the activation after it.
pub(super) struct Gemm<'a> {
    pub weights: ConvWeights<'a>,
    pub then: Then,
    pub m: usize,
    pub k: usize,
}

/// The vector kernels, best first.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kernel {
    Avx512,
    Avx2,
}

impl Kernel {
    /// Every vector kernel, best first.
    const ALL: [Kernel; 2] = [Kernel::Avx512, Kernel::Avx2];

    /// Whether this CPU runs it.
    fn runs_here(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            use std::arch::is_x86_feature_detected as has;
            match self {
                Kernel::Avx512 => has!("avx512f"),
                Kernel::Avx2 => has!("avx2") && has!("fma"),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// The best this CPU runs.
    fn best() -> Option<Kernel> {
        Kernel::ALL.into_iter().find(|k| k.runs_here())
    }
}

/// Whether this CPU runs a vector kernel (else tract keeps the
/// convolution: the plain loop below is for checking, not for speed).
pub(super) fn available() -> bool {
    Kernel::best().is_some()
}

impl Gemm<'_> {
    /// One image: `x` holds `k × n` values, `out` `m × n`.
    pub fn run(&self, x: &[f32], n: usize, out: &mut [f32]) {
        #[cfg(target_arch = "x86_64")]
        if let Some(kernel) = Kernel::best() {
            // SAFETY: `best` returns only a kernel this CPU runs.
            unsafe { self.run_on(kernel, x, n, out) };
            return;
        }
        self.run_plain(x, n, out)
    }

    /// One image on `kernel`, which this CPU must run (for tests: `run`
    /// picks the best).
    #[cfg(all(test, target_arch = "x86_64"))]
    fn run_with(&self, kernel: Kernel, x: &[f32], n: usize, out: &mut [f32]) {
        assert!(
            kernel.runs_here(),
            "{kernel:?} needs a CPU feature this one lacks"
        );
        // SAFETY: checked just above.
        unsafe { self.run_on(kernel, x, n, out) }
    }

    /// # Safety
    /// This CPU runs `kernel`.
    #[cfg(target_arch = "x86_64")]
    unsafe fn run_on(&self, kernel: Kernel, x: &[f32], n: usize, out: &mut [f32]) {
        // The vector kernels read and write by pointer within these.
        assert!(self.weights.kernel.len() == self.m * self.k);
        assert!(x.len() == self.k * n && out.len() == self.m * n);
        // SAFETY: the CPU runs `kernel` (the caller's contract); lengths
        // checked.
        unsafe {
            match kernel {
                Kernel::Avx512 => simd::run::<simd::Avx512>(self, x, n, out),
                Kernel::Avx2 => simd::run::<simd::Avx2>(self, x, n, out),
            }
        }
    }

    /// The same sums, one value at a time, in the same order of `k`.
    pub fn run_plain(&self, x: &[f32], n: usize, out: &mut [f32]) {
        let weights = &self.weights;
        for (row, (out, w)) in out
            .chunks_exact_mut(n)
            .zip(weights.kernel.chunks_exact(self.k))
            .enumerate()
        {
            out.fill(weights.bias(row));
            for (wk, xk) in w.iter().zip(x.chunks_exact(n)) {
                out.iter_mut().zip(xk).for_each(|(o, v)| *o += wk * v);
            }
            let slope = weights.slope(row);
            out.iter_mut().for_each(|o| *o = self.then.apply(*o, slope));
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use super::super::prelu::{activate, activate16};
    use super::{Gemm, Then, CHUNK, KC, MAX_MR, NR};
    use std::arch::x86_64::*;

    /// One pass of `kc` input channels over one tile of `out`.
    pub(super) struct Pass {
        /// Start of the tile's kernel rows at this pass's first channel
        /// (rows past `m` repeat the last one; their sums are dropped).
        w: [*const f32; MAX_MR],
        b: *const f32,
        ldb: usize,
        kc: usize,
        /// First pass: start from the bias; later ones from `out`.
        first: bool,
        /// Last pass: apply the activation.
        last: bool,
    }

    /// A register tile of `MR` output channels × `NR` pixels.
    pub(super) trait Tile {
        const MR: usize;
        /// `MR × NR` values of `out` at `c` (row stride `ldc`), output rows
        /// from `m0`: the pass's sums added to the bias or to what `c` holds.
        ///
        /// # Safety
        /// The CPU has the tile's features; `c` holds `MR` rows of `NR`
        /// values, `ldc` apart; the `w` rows and `b` hold `kc` values (rows
        /// `ldb` apart), as `run` sets them.
        unsafe fn tile(g: &Gemm, p: &Pass, m0: usize, c: *mut f32, ldc: usize);
    }

    /// # Safety
    /// The CPU has `T`'s features; the kernel holds `m × k` values, `x`
    /// `k × n`, `out` `m × n`.
    pub(super) unsafe fn run<T: Tile>(g: &Gemm, x: &[f32], n: usize, out: &mut [f32]) {
        // `Pass::w` and `spare` hold rows for at most `MAX_MR` channels.
        const { assert!(T::MR <= MAX_MR) };
        let (m, k) = (g.m, g.k);
        // The last pixels, when fewer than a tile, zero-padded to one.
        let mut edge = vec![0f32; KC.min(k) * NR];
        // A tile that does not fit `out` is computed here and copied.
        let mut spare = [0f32; MAX_MR * NR];
        for k0 in (0..k).step_by(KC) {
            let kc = KC.min(k - k0);
            let chunk = (CHUNK / kc).max(NR) / NR * NR;
            for c0 in (0..n).step_by(chunk) {
                let c1 = (c0 + chunk).min(n);
                let whole = c0 + (c1 - c0) / NR * NR;
                if whole < c1 {
                    let cols = c1 - whole;
                    for (row, src) in edge.chunks_exact_mut(NR).zip(x[k0 * n..].chunks(n)) {
                        row[..cols].copy_from_slice(&src[whole..c1]);
                        row[cols..].fill(0.0);
                    }
                }
                for m0 in (0..m).step_by(T::MR) {
                    let rows = T::MR.min(m - m0);
                    let mut pass = Pass {
                        w: std::array::from_fn(|i| {
                            g.weights.kernel[(m0 + i.min(rows - 1)) * k + k0..].as_ptr()
                        }),
                        b: edge.as_ptr(),
                        ldb: NR,
                        kc,
                        first: k0 == 0,
                        last: k0 + kc == k,
                    };
                    for n0 in (c0..c1).step_by(NR) {
                        let cols = NR.min(c1 - n0);
                        if cols == NR {
                            (pass.b, pass.ldb) = (x[k0 * n + n0..].as_ptr(), n);
                        } else {
                            (pass.b, pass.ldb) = (edge.as_ptr(), NR);
                        }
                        let at = m0 * n + n0;
                        if rows == T::MR && cols == NR {
                            // SAFETY: a whole tile of `out` from `at`, rows `n` apart.
                            unsafe { T::tile(g, &pass, m0, out[at..].as_mut_ptr(), n) };
                            continue;
                        }
                        // Later passes add to what the earlier ones wrote (on
                        // the first, `out` may not be initialized yet).
                        if !pass.first {
                            for (i, s) in spare.chunks_exact_mut(NR).take(rows).enumerate() {
                                s[..cols].copy_from_slice(&out[at + i * n..][..cols]);
                            }
                        }
                        // SAFETY: `spare` holds `MAX_MR` rows, `NR` apart.
                        unsafe { T::tile(g, &pass, m0, spare.as_mut_ptr(), NR) };
                        for (i, s) in spare.chunks_exact(NR).take(rows).enumerate() {
                            out[at + i * n..][..cols].copy_from_slice(&s[..cols]);
                        }
                    }
                }
            }
        }
    }

    /// 6 channels × two 8-lane vectors: 12 accumulators.
    pub(super) struct Avx2;

    impl Tile for Avx2 {
        const MR: usize = 6;

        unsafe fn tile(g: &Gemm, p: &Pass, m0: usize, c: *mut f32, ldc: usize) {
            // SAFETY: the caller's contract.
            unsafe { avx2_tile(g, p, m0, c, ldc) }
        }
    }

    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2_tile(g: &Gemm, p: &Pass, m0: usize, c: *mut f32, ldc: usize) {
        const MR: usize = Avx2::MR;
        // SAFETY: as `Tile::tile` requires.
        unsafe {
            let row = |i: usize| (m0 + i).min(g.m - 1);
            let mut acc = [[_mm256_setzero_ps(); 2]; MR];
            for (i, a) in acc.iter_mut().enumerate() {
                *a = if p.first {
                    [_mm256_set1_ps(g.weights.bias(row(i))); 2]
                } else {
                    let c = c.add(i * ldc);
                    [_mm256_loadu_ps(c), _mm256_loadu_ps(c.add(8))]
                };
            }
            let mut b = p.b;
            for kk in 0..p.kc {
                let b0 = _mm256_loadu_ps(b);
                let b1 = _mm256_loadu_ps(b.add(8));
                for (a, w) in acc.iter_mut().zip(p.w) {
                    let s = _mm256_broadcast_ss(&*w.add(kk));
                    a[0] = _mm256_fmadd_ps(s, b0, a[0]);
                    a[1] = _mm256_fmadd_ps(s, b1, a[1]);
                }
                b = b.add(p.ldb);
            }
            // The activation only once every input channel is summed.
            let then = if p.last { g.then } else { Then::Nothing };
            for (i, a) in acc.iter().enumerate() {
                let c = c.add(i * ldc);
                let slope = g.weights.slope(row(i));
                for (half, v) in a.iter().enumerate() {
                    _mm256_storeu_ps(c.add(half * 8), activate(*v, then, slope));
                }
            }
        }
    }

    /// 8 channels × one 16-lane vector: 8 accumulators, enough to keep two
    /// FMA units of latency 4 busy.
    pub(super) struct Avx512;

    impl Tile for Avx512 {
        const MR: usize = 8;

        unsafe fn tile(g: &Gemm, p: &Pass, m0: usize, c: *mut f32, ldc: usize) {
            // SAFETY: the caller's contract.
            unsafe { avx512_tile(g, p, m0, c, ldc) }
        }
    }

    #[target_feature(enable = "avx512f")]
    unsafe fn avx512_tile(g: &Gemm, p: &Pass, m0: usize, c: *mut f32, ldc: usize) {
        const MR: usize = Avx512::MR;
        // SAFETY: as `Tile::tile` requires.
        unsafe {
            let row = |i: usize| (m0 + i).min(g.m - 1);
            let mut acc = [_mm512_setzero_ps(); MR];
            for (i, a) in acc.iter_mut().enumerate() {
                *a = if p.first {
                    _mm512_set1_ps(g.weights.bias(row(i)))
                } else {
                    _mm512_loadu_ps(c.add(i * ldc))
                };
            }
            let mut b = p.b;
            for kk in 0..p.kc {
                let v = _mm512_loadu_ps(b);
                for (a, w) in acc.iter_mut().zip(p.w) {
                    *a = _mm512_fmadd_ps(_mm512_set1_ps(*w.add(kk)), v, *a);
                }
                b = b.add(p.ldb);
            }
            let then = if p.last { g.then } else { Then::Nothing };
            for (i, a) in acc.iter().enumerate() {
                let slope = g.weights.slope(row(i));
                _mm512_storeu_ps(c.add(i * ldc), activate16(*a, then, slope));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::window::textbook::values;
    use super::*;

    /// Every tile shape the loops meet, on each kernel this CPU runs: rows
    /// short of a tile, pixels short of one (and of a chunk), input
    /// channels past one pass, each activation, one bias or one per row.
    #[test]
    #[cfg(target_arch = "x86_64")]
    fn the_vector_kernels_give_the_plain_sums() {
        let kernels: Vec<Kernel> = Kernel::ALL.into_iter().filter(|k| k.runs_here()).collect();
        assert!(
            kernels.contains(&Kernel::Avx2),
            "this test needs an x86-64 CPU with AVX2 and FMA"
        );
        // The AVX-512 tile is checked on CPUs that have it, the only ones
        // that ever run it.
        let shapes = [
            (1, 1, 1),
            (6, 16, 16),
            (8, 16, 16),
            (7, 3, 17),
            (5, 40, 15),
            (13, 300, 40),
            (12, 257, 33),
            (4, 8, 9000),
            (20, 520, 130),
            (7, 300, 600),
            (16, 300, 600),
        ];
        for (kernel, (m, k, n)) in kernels.iter().flat_map(|&kr| shapes.map(|s| (kr, s))) {
            for then in [Then::Nothing, Then::Relu, Then::Prelu] {
                for bias in [values(m, 3), vec![0.5]] {
                    let (w, x, slopes) = (values(m * k, 1), values(k * n, 2), values(m, 4));
                    let g = Gemm {
                        weights: ConvWeights {
                            kernel: &w,
                            bias: &bias,
                            slopes: &slopes,
                        },
                        then,
                        m,
                        k,
                    };
                    let (mut fast, mut plain) = (vec![f32::NAN; m * n], vec![0.0; m * n]);
                    g.run_with(kernel, &x, n, &mut fast);
                    g.run_plain(&x, n, &mut plain);
                    // The vector kernel rounds once per multiply-add: the sums
                    // agree to float precision of their terms' magnitude.
                    let scale = k as f32 * 2.4 * 2.5 + 2.5;
                    for (i, (a, b)) in fast.iter().zip(&plain).enumerate() {
                        assert!(
                            (a - b).abs() <= 1e-6 * scale,
                            "{kernel:?} m{m} k{k} n{n} {then:?} at {i}: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn plain_sums_are_the_textbook_ones() {
        // 2 output channels, 3 input channels, 2 pixels.
        let w = [1.0, 2.0, 3.0, -1.0, 0.5, 0.0];
        let x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0];
        let (bias, slopes) = ([0.5, -10.0], [0.0, 0.25]);
        let mut out = [0.0; 4];
        let g = |then| Gemm {
            weights: ConvWeights {
                kernel: &w,
                bias: &bias,
                slopes: &slopes,
            },
            then,
            m: 2,
            k: 3,
        };
        g(Then::Nothing).run_plain(&x, 2, &mut out);
        assert_eq!(out, [22.5, 28.5, -9.5, -10.0]);
        g(Then::Relu).run_plain(&x, 2, &mut out);
        assert_eq!(out, [22.5, 28.5, 0.0, 0.0]);
        g(Then::Prelu).run_plain(&x, 2, &mut out);
        assert_eq!(out, [22.5, 28.5, -9.5 * 0.25, -10.0 * 0.25]);
    }
}
