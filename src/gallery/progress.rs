//! Long work told in the log: every few percent, with the time it has
//! taken and about how long is left (a million people take half an hour to
//! index on 2 cores; a server that says nothing for that long looks hung).

use std::time::{Duration, Instant};

/// A line each time another STEP percent is done.
const STEP: usize = 5;
/// Work done sooner than this says nothing at all.
const QUIET_FOR: Duration = Duration::from_secs(5);

pub struct Progress {
    what: String,
    started: Instant,
    /// The next percentage worth a line.
    next: usize,
    /// Whether a line was written (then the end gets one too).
    told: bool,
}

impl Progress {
    /// `what`: the start of each line, e.g. "gallery: indexing 1000000 faces".
    pub fn new(what: String) -> Self {
        Progress {
            what,
            started: Instant::now(),
            next: STEP,
            told: false,
        }
    }

    /// `done` of `total`: a line for `say` when another step is passed.
    pub fn update(&mut self, done: usize, total: usize, say: impl FnOnce(&str)) {
        let spent = self.started.elapsed();
        if let Some(line) = self.line(done, total, spent) {
            say(&line);
        }
    }

    /// The last line, when earlier ones were written.
    pub fn finish(&self, say: impl FnOnce(&str)) {
        if self.told {
            say(&format!(
                "{}: done in {}",
                self.what,
                human(self.started.elapsed())
            ));
        }
    }

    fn line(&mut self, done: usize, total: usize, spent: Duration) -> Option<String> {
        if total == 0 || done == 0 || spent < QUIET_FOR {
            return None;
        }
        let percent = done.min(total) * 100 / total;
        if percent < self.next || percent >= 100 {
            return None;
        }
        self.next = (percent / STEP + 1) * STEP;
        self.told = true;
        let left = spent.mul_f64((total - done) as f64 / done as f64);
        Some(format!(
            "{}: {percent}% ({done} of {total}) in {}, about {} left",
            self.what,
            human(spent),
            human(left)
        ))
    }
}

/// 3 h 2 min, 4 min 10 s, 12 s.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    match s {
        0..=59 => format!("{s} s"),
        60..=3599 => format!("{} min {} s", s / 60, s % 60),
        _ => format!("{} h {} min", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_every_step_with_the_time_left() {
        let mut p = Progress::new("indexing 1000 faces".into());
        let at = |s| Duration::from_secs(s);
        assert_eq!(p.line(100, 1000, at(2)), None, "quiet at first");
        assert_eq!(
            p.line(120, 1000, at(60)).as_deref(),
            Some("indexing 1000 faces: 12% (120 of 1000) in 1 min 0 s, about 7 min 20 s left")
        );
        assert_eq!(p.line(140, 1000, at(70)), None, "within the same step");
        assert!(p.line(150, 1000, at(75)).is_some());
        assert_eq!(p.line(1000, 1000, at(500)), None, "the end is finish's");
        assert!(p.told);
        assert_eq!(human(at(7322)), "2 h 2 min");
    }
}
