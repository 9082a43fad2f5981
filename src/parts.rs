//! Work over a slice split into contiguous parts, a thread a part (the
//! calling thread takes the first): an Execute's decoding
//! (backend/decode.rs) and a model run's inputs (engine/onnx/net.rs). A part
//! whose thread cannot start, or panics, comes back as why; the other parts
//! are unharmed.

use std::thread;

/// `work` over `items` in at most `threads` contiguous parts, in order:
/// each part's length and its output, or why it has none. The threads are
/// named `name`.
pub fn in_parts<T: Sync, P: Send>(
    items: &[T],
    threads: usize,
    name: &str,
    work: impl Fn(&[T]) -> P + Sync,
) -> Vec<(usize, Result<P, String>)> {
    let run = items.len().div_ceil(threads.clamp(1, items.len().max(1)));
    let mut parts = items.chunks(run.max(1));
    let Some(first) = parts.next() else {
        return Vec::new();
    };
    let work = &work;
    thread::scope(|scope| {
        let started: Vec<_> = parts
            .map(|part| {
                let thread = thread::Builder::new().name(name.into());
                (part.len(), thread.spawn_scoped(scope, move || work(part)))
            })
            .collect();
        let mut out = vec![(first.len(), Ok(work(first)))];
        for (len, handle) in started {
            let part = match handle {
                Ok(h) => h.join().map_err(|_| "panicked".to_string()),
                Err(e) => Err(format!("did not start: {e}")),
            };
            out.push((len, part));
        }
        out
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parts in order, each as long as it says, whatever the threads; a
    /// panicking part comes back as such, the others whole.
    #[test]
    fn parts_come_back_in_order_and_a_panic_stays_in_its_part() {
        let items: Vec<u32> = (0..23).collect();
        for threads in [0, 1, 2, 5, 23, 64] {
            let parts = in_parts(&items, threads, "test", |part| part.to_vec());
            let lens: usize = parts.iter().map(|(len, _)| len).sum();
            let joined: Vec<u32> = parts.into_iter().flat_map(|(_, p)| p.unwrap()).collect();
            assert_eq!(
                (joined, lens),
                (items.clone(), items.len()),
                "{threads} threads"
            );
        }
        let parts = in_parts(&items, 3, "test", |part| {
            assert!(!part.contains(&20), "a part that panics");
            part.len()
        });
        let got: Vec<_> = parts
            .into_iter()
            .map(|(len, p)| p.map(|n| n == len))
            .collect();
        assert_eq!(got, [Ok(true), Ok(true), Err("panicked".to_string())]);
        assert!(in_parts(&[] as &[u32], 4, "test", |p| p.len()).is_empty());
    }
}
