//! ENROLL for a whole batch: each request's images must hold exactly one
//! face (else that request fails alone and stores nothing), then all the
//! batch's enrollments go to the gallery in one store write, acknowledged
//! only once written.

use crate::backend::job::{Analyzed, ENROLL};
use crate::error::{Error, Result};
use crate::gallery::{Enrolled, Gallery, Named};

/// Enroll every enrolling request of the batch. A request whose enrollment
/// fails becomes that error; the others get their `Enrolled` records (one
/// per image), the rest `None`.
pub fn enroll_batch(
    gallery: &Gallery,
    batch: &mut [Result<Analyzed>],
) -> Vec<Option<Vec<Enrolled>>> {
    let mut enrolling = Vec::new();
    let mut faces = Vec::new();
    for (i, item) in batch.iter_mut().enumerate() {
        let Ok(analyzed) = item else { continue };
        match enrollment(analyzed) {
            Ok(None) => {}
            Ok(Some(request)) => {
                enrolling.push(i);
                faces.push(request);
            }
            Err(e) => *item = Err(e),
        }
    }
    let mut out: Vec<Option<Vec<Enrolled>>> = batch.iter().map(|_| None).collect();
    for (i, result) in enrolling.into_iter().zip(gallery.enroll_batch(faces)) {
        match result {
            Ok(enrolled) => out[i] = Some(enrolled),
            Err(e) => batch[i] = Err(e),
        }
    }
    out
}

/// The (name, embedding) pairs one request enrolls with its key label, or
/// why it cannot.
fn enrollment(analyzed: &Analyzed) -> Result<Option<(Vec<Named>, Option<String>)>> {
    let Some(names) = &analyzed.job.enroll else {
        return Ok(None);
    };
    let mut pairs = Vec::with_capacity(names.len());
    for (i, (name, found)) in names.iter().zip(&analyzed.found).enumerate() {
        let faces = &found.faces;
        if faces.len() != 1 {
            return Err(Error::invalid(format!(
                "{}: enrollment needs exactly one face in the image, found {}; nothing was enrolled",
                analyzed.job.label(i, ENROLL),
                faces.len()
            )));
        }
        pairs.push(Named {
            name: name.clone(),
            embedding: faces[0].embedding.clone(),
        });
    }
    Ok(Some((pairs, analyzed.job.by.clone())))
}
