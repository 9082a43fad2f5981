//! The encoded images of one Execute decoded together, on several threads:
//! reading a request (Triton's API, on the instance's thread) only copies an
//! ENCODED file's bytes; decoding them, 2.3 ms a 640x480 JPEG, is spread
//! here over `decode_threads`, so an instance whose engine is quick (a GPU)
//! is not held to one core's decoding. A request whose image does not
//! decode fails alone, with the error it always had.

use crate::backend::job::Job;
use crate::backend::tensors::{decode_encoded, Decoded};
use crate::error::{Error, Result};
use crate::parts::in_parts;

/// Every job's `encoded` images decoded into its frames, on at most
/// `threads` threads (the calling one among them).
pub fn decode_all(jobs: &mut [Result<Job>], max_pixels: u64, threads: usize) {
    let images: Vec<&[u8]> = (jobs.iter().flatten())
        .flat_map(|job| job.encoded.iter().map(Vec::as_slice))
        .collect();
    if images.is_empty() {
        return;
    }
    let mut decoded =
        spread(&images, threads, |bytes| decode_encoded(bytes, max_pixels)).into_iter();
    for slot in jobs.iter_mut() {
        let Ok(job) = slot else { continue };
        let count = std::mem::take(&mut job.encoded).len();
        let mine: Result<Vec<Decoded>> = decoded.by_ref().take(count).collect();
        match mine {
            Ok(frames) => (job.frames, job.decoded_in) = frames.into_iter().unzip(),
            Err(e) => *slot = Err(e),
        }
    }
}

/// `f` over `items` in contiguous runs on at most `threads` threads: one
/// result per item, in order. A run whose thread cannot start, or panics,
/// fails its items alone (the calling thread takes the first run).
fn spread<T: Sync, R: Send>(
    items: &[T],
    threads: usize,
    f: impl Fn(&T) -> Result<R> + Sync,
) -> Vec<Result<R>> {
    let each = |part: &[T]| part.iter().map(&f).collect::<Vec<_>>();
    (in_parts(items, threads, "face-decode", each).into_iter())
        .flat_map(|(len, part)| {
            part.unwrap_or_else(|why| failed(len, &format!("a decoding thread {why}")))
        })
        .collect()
}

fn failed<R>(count: usize, why: &str) -> Vec<Result<R>> {
    (0..count).map(|_| Err(Error::internal(why))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_come_back_in_order_whatever_the_threads() {
        let items: Vec<u32> = (0..23).collect();
        for threads in [0, 1, 2, 5, 23, 64] {
            let got = spread(&items, threads, |&n| match n % 7 {
                3 => Err(Error::invalid(format!("{n}"))),
                _ => Ok(n * 2),
            });
            assert_eq!(got.len(), 23, "{threads} threads");
            for (n, r) in items.iter().zip(&got) {
                match n % 7 {
                    3 => assert_eq!(r.as_ref().unwrap_err().message(), n.to_string()),
                    _ => assert_eq!(*r.as_ref().unwrap(), n * 2),
                }
            }
        }
        assert!(spread(&[] as &[u32], 4, |&n| Ok(n)).is_empty());
    }
}
