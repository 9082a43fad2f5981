//! WebP by libwebp, compiled into the library from the `webp` crate's
//! sources: about twice as fast as the `image` crate's own decoder on the
//! sample photo (docs/benchmarks.md, "Decoding and the image work"). What
//! libwebp does not decode here (an animation) is left to the `image` crate.

use super::{Frame, OwnedFrame};
use crate::error::Result;

/// The RGB frame of `bytes`, or None for the `image` crate to decode (or to
/// reject). `check` sees the header's size before the pixels are allocated.
pub(super) fn decode_rgb(
    bytes: &[u8],
    check: impl FnOnce(u64, u64) -> Result<()>,
) -> Option<Result<OwnedFrame>> {
    let header = webp::BitstreamFeatures::new(bytes)?;
    if let Err(refused) = check(header.width().into(), header.height().into()) {
        return Some(Err(refused));
    }
    let image = webp::Decoder::new(bytes).decode()?;
    let rgb = if image.is_alpha() {
        // Alpha dropped, as for every other format.
        image
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect()
    } else {
        image.to_vec()
    };
    Some(Ok(Frame {
        width: image.width(),
        height: image.height(),
        rgb: rgb.into(),
    }))
}
