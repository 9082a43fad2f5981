//! The gallery folder's photos as this embedder saw them, per gallery: a
//! cache beside the enrollments, never part of the change log (followers
//! have their own folders).

use std::collections::HashSet;

use ::postgres::Transaction;

use super::super::{photo_from_row, photo_to_row, Photos};
use super::read::{ReadError, Scope};

pub fn read(tx: &mut Transaction<'_>, scope: Scope) -> Result<Photos, ReadError> {
    let rows = tx.query(
        "SELECT content_key, faces, embedding FROM triton_face.folder_photos \
         WHERE gallery = $1 AND embedder = $2",
        &[&scope.gallery, &scope.embedder],
    )?;
    Ok(rows
        .iter()
        .filter_map(|r| {
            let faces: i32 = r.get(1);
            let blob: Option<&[u8]> = r.get(2);
            photo_from_row(faces.into(), blob, scope.dim).map(|p| (r.get(0), p))
        })
        .collect())
}

pub fn keep(
    tx: &mut Transaction<'_>,
    scope: Scope,
    new: &Photos,
    keep: &HashSet<String>,
) -> Result<(), ::postgres::Error> {
    let keep: Vec<&str> = keep.iter().map(String::as_str).collect();
    tx.execute(
        "DELETE FROM triton_face.folder_photos \
         WHERE gallery = $1 AND embedder = $2 AND NOT (content_key = ANY($3))",
        &[&scope.gallery, &scope.embedder, &keep],
    )?;
    for (key, faces) in new {
        let (count, blob) = photo_to_row(faces);
        let count = i32::try_from(count).unwrap_or(i32::MAX);
        tx.execute(
            "INSERT INTO triton_face.folder_photos \
             (gallery, embedder, content_key, faces, embedding) VALUES ($1, $2, $3, $4, $5) \
             ON CONFLICT (gallery, embedder, content_key) \
             DO UPDATE SET faces = $4, embedding = $5, seen_at = now()",
            &[&scope.gallery, &scope.embedder, key, &count, &blob],
        )?;
    }
    Ok(())
}
