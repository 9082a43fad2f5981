//! A saved vector index published into the database, so that a server
//! joining a large gallery copies it instead of rebuilding the graph (about
//! 20 minutes for a million people on 2 cores). One copy per gallery and
//! embedder, in parts of `PART_BYTES`: memory stays bounded both ways, and
//! a reader sees one whole copy (its snapshot) while another is published.

use std::io::{Read, Write};

use ::postgres::{Client, Transaction};

use super::read::{ReadError, Scope};

/// Large enough that a million people's index is a few hundred rows, small
/// enough to hold in memory while it goes over the wire.
const PART_BYTES: usize = 16 << 20;
/// Publishers take turns ("triton_p" in ASCII); changes to the gallery do
/// not wait for them.
const PUBLISH_LOCK: i64 = 0x7472_6974_6f6e_5f70;

/// The published manifest, if any.
pub fn manifest(tx: &mut Transaction<'_>, scope: Scope) -> Result<Option<Vec<u8>>, ReadError> {
    let row = tx.query_opt(
        "SELECT manifest FROM triton_face.published_indexes WHERE gallery = $1 AND embedder = $2",
        &[&scope.gallery, &scope.embedder],
    )?;
    Ok(row.map(|r| r.get(0)))
}

/// The published copy: its manifest, its bytes written to `out`.
pub fn fetch(
    tx: &mut Transaction<'_>,
    scope: Scope,
    out: &mut dyn Write,
) -> Result<Option<Vec<u8>>, ReadError> {
    let Some(row) = tx.query_opt(
        "SELECT manifest, parts FROM triton_face.published_indexes \
         WHERE gallery = $1 AND embedder = $2",
        &[&scope.gallery, &scope.embedder],
    )?
    else {
        return Ok(None);
    };
    let (manifest, parts): (Vec<u8>, i32) = (row.get(0), row.get(1));
    for part in 0..parts {
        let row = tx.query_one(
            "SELECT bytes FROM triton_face.published_index_parts \
             WHERE gallery = $1 AND embedder = $2 AND part = $3",
            &[&scope.gallery, &scope.embedder, &part],
        )?;
        out.write_all(row.get::<_, &[u8]>(0))
            .map_err(|e| ReadError::BadRow(format!("copying the published index: {e}")))?;
    }
    Ok(Some(manifest))
}

/// Replace the published copy with `manifest` and the bytes of `file`, in
/// one transaction.
pub fn publish(
    client: &mut Client,
    scope: Scope,
    manifest: &[u8],
    file: &mut dyn Read,
) -> Result<(), ReadError> {
    let mut tx = client.transaction()?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&PUBLISH_LOCK])?;
    let key: [&(dyn ::postgres::types::ToSql + Sync); 2] = [&scope.gallery, &scope.embedder];
    tx.execute(
        "DELETE FROM triton_face.published_indexes WHERE gallery = $1 AND embedder = $2",
        &key,
    )?;
    tx.execute(
        "INSERT INTO triton_face.published_indexes (gallery, embedder, manifest, parts) \
         VALUES ($1, $2, $3, 0)",
        &[&scope.gallery, &scope.embedder, &manifest],
    )?;
    let mut buf = vec![0u8; PART_BYTES];
    let mut parts = 0i32;
    loop {
        let n = fill(file, &mut buf)
            .map_err(|e| ReadError::BadRow(format!("reading the index to publish: {e}")))?;
        if n == 0 {
            break;
        }
        tx.execute(
            "INSERT INTO triton_face.published_index_parts (gallery, embedder, part, bytes) \
             VALUES ($1, $2, $3, $4)",
            &[&scope.gallery, &scope.embedder, &parts, &&buf[..n]],
        )?;
        parts += 1;
    }
    tx.execute(
        "UPDATE triton_face.published_indexes SET parts = $3 \
         WHERE gallery = $1 AND embedder = $2",
        &[&scope.gallery, &scope.embedder, &parts],
    )?;
    tx.commit()?;
    Ok(())
}

/// Read until `buf` is full or the file ends; how many bytes.
fn fill(file: &mut dyn Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}
