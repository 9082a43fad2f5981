//! Choosing the family at load: the one named by `detector_family`, which
//! must fit the model's outputs, or (`auto`) the one family whose layout the
//! outputs are in. A model no family reads, or several read differently,
//! fails the load with what it shows and the families that came close.

use std::path::Path;

use super::{Decode, Family, Graph, FAMILIES};
use crate::error::{Error, Result};

/// `detector_family`'s values: `auto`, then every family of `FAMILIES`.
pub const FAMILY_NAMES: &[&str] = &[
    "auto",
    "ultraface",
    "scrfd",
    "retinaface",
    "yunet",
    "blazeface",
    "yolo-face",
];

/// The family called `name` (any case).
pub fn find(name: &str) -> Result<&'static Family> {
    (FAMILIES.iter().copied())
        .find(|f| f.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| {
            Error::invalid(format!(
                "detector_family {name:?} is not one of {}",
                FAMILY_NAMES.join(", ")
            ))
        })
}

/// `family`'s decoder for the model, or a load error that says why it does
/// not fit and which family does.
pub fn fit(family: &Family, graph: &Graph, path: &Path) -> Result<Box<dyn Decode>> {
    (family.fit)(graph).map_err(|misfit| {
        let others: Vec<&str> = (FAMILIES.iter())
            .filter(|f| f.name != family.name && (f.fit)(graph).is_ok())
            .map(|f| f.name)
            .collect();
        let instead = match others.as_slice() {
            [] => String::new(),
            names => format!("; it is in the layout of {}", names.join(", ")),
        };
        Error::unavailable(format!(
            "detector_model {}: detector_family {} does not fit it: {} ({}){instead}",
            path.display(),
            family.name,
            misfit.why,
            graph.describe()
        ))
    })
}

/// The one family whose layout the model's outputs are in. Families that
/// read the same layout the same way (insightface's RetinaFace is SCRFD's)
/// count once: the first of them.
pub fn auto(graph: &Graph, path: &Path) -> Result<(&'static Family, Box<dyn Decode>)> {
    let mut fits: Vec<(&'static Family, Box<dyn Decode>)> = Vec::new();
    let mut near = Vec::new();
    for &family in FAMILIES {
        match (family.fit)(graph) {
            Ok(decode) => {
                let same = fits.iter().any(|(_, d)| d.describe() == decode.describe());
                if !same {
                    fits.push((family, decode));
                }
            }
            Err(misfit) if misfit.near => near.push(format!("{}: {}", family.name, misfit.why)),
            Err(_) => {}
        }
    }
    match fits.len() {
        1 => Ok(fits.remove(0)),
        0 => Err(Error::unavailable(format!(
            "detector_model {}: no detector family reads its outputs ({}); {}; set \
             `detector_family` to one of {} if the model is one of them",
            path.display(),
            graph.describe(),
            match near.is_empty() {
                true => "none came close".to_string(),
                false => format!("close: {}", near.join("; ")),
            },
            FAMILY_NAMES[1..].join(", ")
        ))),
        _ => {
            let names: Vec<&str> = fits.iter().map(|(f, _)| f.name).collect();
            Err(Error::unavailable(format!(
                "detector_model {}: its outputs fit several families ({}; {}): set \
                 `detector_family` to the one it is",
                path.display(),
                names.join(", "),
                graph.describe()
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_family_has_its_name_and_only_those() {
        let names: Vec<&str> = FAMILIES.iter().map(|f| f.name).collect();
        assert_eq!(names, FAMILY_NAMES[1..]);
        assert_eq!(find("SCRFD").unwrap().name, "scrfd");
        assert!(find("mtcnn").is_err());
    }
}
