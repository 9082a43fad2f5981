//! Model state: settings parsed from config.pbtxt and the gallery, shared by
//! all instances of the model.

use std::path::PathBuf;
use std::sync::Mutex;

use crate::backend::access::Access;
use crate::backend::settings::{EngineKind, Settings};
use crate::engine::dlib::{DetectorKind, MMOD_FILE, RESNET_FILE, SHAPE5_FILE};
use crate::engine::Engine;
use crate::error::{Error, Result};
use crate::gallery::store::{self, Identity};
use crate::gallery::{Gallery, Opened};
use crate::pipeline::image::frame_from_encoded;
use crate::pipeline::Wanted;
use crate::sequence::Sequences;
use crate::triton::metrics::Gauge;
use crate::triton::{log, ModelHandle};

pub struct ModelState {
    pub name: String,
    pub settings: Settings,
    pub gallery: Gallery,
    /// Who may do what (`gallery_key_file`, `key_rate`).
    pub access: Access,
    /// Sequence models: live per-correlation-ID state, shared by the instances.
    pub sequences: Option<Mutex<Sequences>>,
    /// `face_live_sequences{model=...}` on the metrics endpoint, when available.
    pub live_gauge: Option<Gauge>,
}

/// The engine a model's settings ask for, with its weights loaded.
pub fn new_engine(s: &Settings) -> Result<Box<dyn Engine>> {
    crate::engine::load(s.engine, &s.weights_dir, s.dlib, &s.onnx)
}

impl ModelState {
    pub fn load(model: &ModelHandle) -> Result<Self> {
        let name = model.name()?;
        let dir = model.directory()?;
        let config = model.config_json()?;
        let version_dir = dir.join(model.version()?.to_string());
        let settings = Settings::from_config(&config, &dir, &version_dir)?;
        log::info(&format!(
            "model '{name}' parameters: {}",
            settings.describe_parameters()
        ));
        // Loading an engine here also proves the weights are usable before any
        // instance starts; it then embeds the gallery images and is dropped.
        let mut engine = new_engine(&settings)?;
        let threshold =
            (settings.match_threshold).unwrap_or_else(|| engine.metric().usual_threshold());
        let location = store_location(&name, &settings);
        let access = Access::load(&name, &settings, &location, threshold)?;
        let gallery = open_gallery(&name, &settings, &location, threshold, engine.as_mut())?;
        let sequences = settings.sequence.as_ref().map(|q| {
            log::info(&format!(
                "model '{name}': sequence state for up to {} sequences, {} frames kept per summary, \
                 evicted after {} us idle",
                q.limits.max_sequences,
                q.limits.max_frames,
                q.limits.idle_timeout.as_micros()
            ));
            Mutex::new(Sequences::new(q.limits))
        });
        let live_gauge = sequences.as_ref().and_then(|_| {
            Gauge::new(
                "face_live_sequences",
                "Sequences with live state in the face backend",
                &name,
            )
            .inspect_err(|e| log::warn(&format!("model '{name}': no live-sequence metric: {e}")))
            .ok()
        });
        Ok(ModelState {
            name,
            settings,
            gallery,
            access,
            sequences,
            live_gauge,
        })
    }
}

/// The gallery: its store opened for this engine's embeddings, then the
/// folder's images embedded; what it holds is logged.
fn open_gallery(
    name: &str,
    settings: &Settings,
    location: &store::Location,
    threshold: f32,
    engine: &mut dyn Engine,
) -> Result<Gallery> {
    let (metric, dim) = (engine.metric(), engine.embedding_len());
    let files = model_files(settings);
    let files: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
    let identity = Identity::of_files(engine.name(), metric, dim, &files)?
        .with_conventions(&conventions(settings));
    let store = store::open(location, &identity)?;
    let max = settings.max_gallery_size;
    let (mut gallery, opened) =
        Gallery::open(&settings.gallery_dir, store, metric, dim, threshold, max)?;
    log_opened(name, &identity, &opened);
    if let Some(why) = crate::gallery::memory_lock_refused() {
        log::warn(&format!(
            "model '{name}': the gallery's vectors are kept out of core dumps but not locked \
             against swap: mlock refused ({why}); raise the server's memlock limit (docker run \
             --ulimit memlock=-1, or CAP_IPC_LOCK) to keep them out of swap"
        ));
    }
    if let Some(days) = settings.retention_days {
        let retention = std::time::Duration::try_from_secs_f64(days * 86_400.0)
            .map_err(|_| Error::invalid(format!("retention_days = {days}: too long")))?;
        let expired = gallery.keep_for(retention)?;
        log::info(&format!(
            "model '{name}': retention_days = {days}: {expired} enrollments expired at load"
        ));
    }
    let from_images = load_gallery_images(name, &gallery, engine, settings)?;
    log::info(&format!(
        "model '{name}': engine {}; gallery {} with {from_images} people from images \
         and {} enrolled faces, match threshold {threshold} ({})",
        engine.describe(),
        settings.gallery_dir.display(),
        opened.enrolled,
        metric.name(),
    ));
    Ok(gallery)
}

fn store_location(model: &str, s: &Settings) -> store::Location {
    match s.gallery_store {
        store::StoreKind::Sqlite => store::Location::Sqlite {
            dir: s.gallery_dir.clone(),
            poll: s.postgres.poll,
        },
        store::StoreKind::Postgres => store::Location::Postgres {
            gallery: s.postgres.gallery_name.clone().unwrap_or(model.to_string()),
            settings: s.postgres.clone(),
        },
    }
}

/// The files that give an embedding its meaning: the embedder and what
/// aligns the face for it. Detectors are left out: switching HOG and CNN (or
/// another detector model) must not hide the people enrolled so far.
fn model_files(s: &Settings) -> Vec<PathBuf> {
    match s.engine {
        EngineKind::Dlib => [SHAPE5_FILE, RESNET_FILE]
            .iter()
            .map(|f| s.weights_dir.join(f))
            .collect(),
        EngineKind::Onnx => {
            let o = &s.onnx;
            o.landmark_model
                .iter()
                .cloned()
                .chain([o.embedder_model.clone()])
                .collect()
        }
    }
}

/// What changes an embedding beyond the model files (none for dlib).
fn conventions(s: &Settings) -> String {
    match s.engine {
        EngineKind::Dlib => String::new(),
        EngineKind::Onnx => s.onnx.embedder.identity_text(),
    }
}

fn log_opened(name: &str, identity: &Identity, opened: &Opened) {
    log::info(&format!(
        "model '{name}': gallery store {}, embedder {identity}, saved index {}{}",
        opened.store,
        crate::gallery::index_file_name(&identity.tag()),
        if opened.following {
            "; following the changes other models and servers make to it"
        } else {
            ""
        }
    ));
    if let Some(m) = &opened.migrated {
        log::info(&format!(
            "model '{name}': imported {} enrolled faces from {} into the gallery store; \
             {} such file(s) erased (their rows are in the store)",
            m.entries,
            m.from.display(),
            m.erased
        ));
    }
    let index = &opened.index;
    if let Some(why) = &index.not_used {
        log::warn(&format!(
            "model '{name}': saved gallery index not used: {why}"
        ));
    }
    let t = &index.took;
    let secs = |d: std::time::Duration| format!("{:.1} s", d.as_secs_f64());
    log::info(&format!(
        "model '{name}': gallery index {} in {} (read {}, checked {}, added and named {}, strays {} {}): \
         {} vectors read from the store, {} stale removed, {} gallery images added again{}",
        match (index.from_file, index.fetched) {
            (true, true) => "loaded from the copy another server published to the store",
            (true, false) => "loaded from its file",
            _ => "built",
        },
        secs(t.read + t.checked + t.tables + t.strays),
        secs(t.read),
        secs(t.checked),
        secs(t.tables),
        secs(t.strays),
        if t.strays_taken {
            "taken from its file"
        } else {
            "counted"
        },
        index.added,
        index.removed - index.images,
        index.images,
        match index.strays {
            0 => String::new(),
            n => format!(", {n} out of the graph's reach (scanned at every search)"),
        }
    ));
    match &index.published {
        Some(Ok(bytes)) => log::info(&format!(
            "model '{name}': gallery index published to the store for servers that join later ({} MiB)",
            bytes >> 20
        )),
        Some(Err(why)) => log::warn(&format!(
            "model '{name}': gallery index not published to the store (a joining server will rebuild it): {why}"
        )),
        None => {}
    }
    if opened.foreign > 0 {
        log::warn(&format!(
            "model '{name}': {} enrolled faces in the gallery store were made by another \
             embedder (engine, metric, length or model files differ from {identity}); they are \
             kept but not matched",
            opened.foreign
        ));
    }
}

/// Add the gallery folder's photos, embedding only those the store has not
/// seen with this setup; each skipped photo is logged with why. How many
/// were added.
fn load_gallery_images(
    name: &str,
    gallery: &Gallery,
    engine: &mut dyn Engine,
    settings: &Settings,
) -> Result<usize> {
    let setup = photo_setup(settings, engine)?;
    let load = gallery.load_folder(&setup, |bytes| {
        let frame = frame_from_encoded("image", bytes, settings.max_image_pixels)?;
        let wanted = Wanted::all(settings.max_faces_per_image);
        let analysis = engine.analyze(&[(&frame, wanted)]).remove(0)?;
        Ok(analysis.faces.into_iter().map(|f| f.embedding).collect())
    })?;
    for (path, why) in &load.skipped {
        log::warn(&format!("gallery image {} skipped: {why}", path.display()));
    }
    if let Some(e) = &load.cache_error {
        log::warn(&format!(
            "model '{name}': the gallery's photo cache was not updated ({e}): the photos are \
             loaded, and embedded again at the next load"
        ));
    }
    if load.cached + load.embedded > 0 {
        log::info(&format!(
            "model '{name}': gallery photos: {} embedded now, {} known from the store",
            load.embedded, load.cached
        ));
    }
    Ok(load.added)
}

/// What decides the faces an engine finds in a folder photo, for the photo
/// cache: every model file (the detector's too) and the settings.
fn photo_setup(settings: &Settings, engine: &dyn Engine) -> Result<String> {
    let mut files = model_files(settings);
    files.extend(detector_files(settings));
    let files: Vec<&std::path::Path> = files.iter().map(PathBuf::as_path).collect();
    let identity = Identity::of_files(
        engine.name(),
        engine.metric(),
        engine.embedding_len(),
        &files,
    )?;
    let engine_settings = match settings.engine {
        EngineKind::Dlib => format!("{:?}", settings.dlib),
        EngineKind::Onnx => format!("{:?}", settings.onnx),
    };
    Ok(format!(
        "{} {}; {engine_settings}; max_image_pixels {}, max_faces_per_image {}",
        identity.model_hash,
        engine.describe(),
        settings.max_image_pixels,
        settings.max_faces_per_image
    ))
}

fn detector_files(s: &Settings) -> Vec<PathBuf> {
    match s.engine {
        EngineKind::Dlib if s.dlib.detector == DetectorKind::Cnn => {
            vec![s.weights_dir.join(MMOD_FILE)]
        }
        EngineKind::Dlib => vec![],
        EngineKind::Onnx => vec![s.onnx.detector_model.clone()],
    }
}
