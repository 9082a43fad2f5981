//! FORGET and LIST: requests that manage the gallery instead of showing an
//! image. They run after the batch's enrollments; each answers with its own
//! documents, FORGET only once its change is durable.

use crate::backend::job::{Analyzed, Manage};
use crate::error::Result;
use crate::gallery::Gallery;
use crate::result::ImageDoc;

/// The documents of every managing request of the batch (`None` for the
/// others); a request whose change fails becomes that error.
pub fn manage_batch(
    gallery: &Gallery,
    batch: &mut [Result<Analyzed>],
) -> Vec<Option<Vec<ImageDoc>>> {
    batch
        .iter_mut()
        .map(|item| {
            let job = &item.as_ref().ok()?.job;
            match run(gallery, job.manage.as_ref()?, job.by.as_deref()) {
                Ok(docs) => Some(docs),
                Err(e) => {
                    *item = Err(e);
                    None
                }
            }
        })
        .collect()
}

fn run(gallery: &Gallery, manage: &Manage, by: Option<&str>) -> Result<Vec<ImageDoc>> {
    Ok(match manage {
        Manage::List { changes } => {
            let (people, size) = gallery.people();
            let changes = match changes {
                Some(limit) => Some(gallery.changes(*limit)?),
                None => None,
            };
            vec![ImageDoc::listing(people, size, changes)]
        }
        Manage::Forget(names) => gallery
            .forget(names, by)?
            .iter()
            .map(ImageDoc::forgotten)
            .collect(),
    })
}
