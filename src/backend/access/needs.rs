//! The roles a request needs, from what it sends, before anything of it is
//! decoded: a refused request costs no decode and changes nothing.

use crate::backend::access::keys::Roles;
use crate::backend::job::{
    DETECT_ONLY, ENROLL, FORGET, LIST, MATCH_THRESHOLD, RETURN_EMBEDDINGS, TOP_K,
};
use crate::backend::tensors::{EMBEDDING, ENCODED, IMAGE, REFERENCE};
use crate::error::Result;
use crate::triton::request::ParameterValue;
use crate::triton::Request;

/// One role a request needs, and what in it asks for the role.
#[derive(Debug, PartialEq)]
pub struct Need {
    pub role: Roles,
    pub why: &'static str,
}

/// What the model answers with when the request does not say.
pub struct Defaults {
    pub threshold: f32,
    pub return_embeddings: bool,
}

/// Every role `request` needs (at least one).
pub fn needs(request: &Request, defaults: &Defaults) -> Result<Vec<Need>> {
    let has = |name: &str| request.input(name).map(|i| i.is_some());
    let param = |name: &str| request.parameter(name);
    let mut needs = Vec::new();
    let mut need = |role, why| needs.push(Need { role, why });
    let (enroll, images) = (has(ENROLL)?, has(IMAGE)? || has(ENCODED)?);
    if enroll || has(FORGET)? || has(LIST)? {
        need(
            Roles::MANAGE,
            "ENROLL, FORGET and LIST change or list the gallery",
        );
    }
    if has(EMBEDDING)? {
        need(
            Roles::SEARCH,
            "EMBEDDING searches the gallery with a vector",
        );
    }
    if has(REFERENCE)? {
        // Distances to vectors of the client's choosing read its face's
        // embedding, one unit vector at a time.
        need(
            Roles::SEARCH,
            "REFERENCE compares faces with vectors the request sends",
        );
    }
    if param(TOP_K)?.is_some() {
        // Candidates are listed within the threshold or not.
        need(
            Roles::SEARCH,
            "top_k lists the nearest people, named or not",
        );
    }
    if number(param(MATCH_THRESHOLD)?).is_some_and(|t| t > defaults.threshold as f64) {
        need(
            Roles::SEARCH,
            "a match_threshold above the model's own names more faces",
        );
    }
    let detect_only = matches!(param(DETECT_ONLY)?, Some(ParameterValue::Bool(true)));
    let embeddings = match param(RETURN_EMBEDDINGS)? {
        Some(ParameterValue::Bool(b)) => b,
        _ => defaults.return_embeddings,
    };
    if images && embeddings && !detect_only {
        need(
            Roles::SEARCH,
            "embeddings in the answer (send return_embeddings: false)",
        );
    }
    if images && !enroll {
        need(Roles::RECOGNIZE, "faces answered with names or boxes");
    }
    if needs.is_empty() {
        // A sequence's START or END without a frame.
        needs.push(Need {
            role: Roles::RECOGNIZE,
            why: "a sequence answered with names",
        });
    }
    Ok(needs)
}

fn number(value: Option<ParameterValue>) -> Option<f64> {
    match value? {
        ParameterValue::Double(x) => Some(x),
        ParameterValue::Int(n) => Some(n as f64),
        _ => None,
    }
}

/// What a request costs of its key's rate (`key_rate`) at admission: one
/// token per image, frame or `EMBEDDING` row it carries, times its `top_k`
/// (each person listed is a distance learned); a request without any (LIST,
/// FORGET, a frameless START or END) costs one. Read from shapes, before
/// decoding; the faces past the first of each image are charged once found
/// (`Access::charge_faces`).
pub fn cost(request: &Request, batched: bool) -> Result<u32> {
    let batch = |shape: &[i64], rank: usize| match batched && shape.len() == rank {
        true => shape[0],
        false => 1,
    };
    let mut items = 1i64;
    for (name, rank) in [(IMAGE, 4), (EMBEDDING, 2)] {
        if let Some(input) = request.input(name)? {
            items = items.max(batch(&input.shape, rank));
        }
    }
    if let Some(input) = request.input(ENCODED)? {
        items = items.max(input.shape.iter().product());
    }
    let top_k = match request.parameter(TOP_K)? {
        Some(ParameterValue::Int(k)) => k.max(1),
        _ => 1,
    };
    let tokens = items.max(1).saturating_mul(top_k);
    Ok(u32::try_from(tokens).unwrap_or(u32::MAX))
}
