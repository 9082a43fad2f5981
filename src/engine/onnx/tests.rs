//! The batched path against one item at a time, on the sample models (as
//! published, with a fixed batch of 1, freed at load) and real photos,
//! through onnxruntime.

use super::net::{load_net, BatchDim, Batching, ItemOutputs, RuntimeChoice};
use super::*;
use crate::engine::test_assets;
use crate::error::ErrorKind;
use crate::pipeline::image::frame_from_encoded;
use crate::pipeline::OwnedFrame;

/// The sample models with `max_engine_batch`, their batch freed or not.
fn engine(max_engine_batch: usize, free_batch: bool) -> OnnxEngine {
    engine_of(
        &test_assets("onnx").join("fr_feature.onnx"),
        max_engine_batch,
        free_batch,
    )
}

/// The sample detector and landmarks with `embedder`.
fn engine_of(embedder: &Path, max_engine_batch: usize, free_batch: bool) -> OnnxEngine {
    let models = test_assets("onnx");
    let settings = OnnxSettings {
        landmark_model: Some(models.join("fr_landmark.onnx")),
        detector_model: models.join("fr_detect.onnx"),
        embedder_model: embedder.to_path_buf(),
        max_engine_batch: Some(max_engine_batch),
        free_batch,
        ..OnnxSettings::defaults(&models)
    };
    OnnxEngine::load(&settings)
        .unwrap_or_else(|e| panic!("{e}: run the tests through scripts/test.sh"))
}

/// A sample model as onnxruntime runs it, its batch as `batching` asks.
fn net(model: &str, batching: Batching) -> super::net::Net {
    let runtime = RuntimeChoice::of(&OnnxSettings::defaults(Path::new("."))).unwrap();
    let path = test_assets("onnx").join(model);
    load_net(
        model,
        &path,
        None,
        &runtime,
        Hygiene::default(),
        batching,
        true,
    )
    .unwrap()
}

/// No face, one, five; four sizes from 480 to 1137 pixels high.
const PHOTOS: [&str; 5] = [
    "obama.jpg",
    "noface.jpg",
    "group5_480.jpg",
    "biden.jpg",
    "obama2.jpg",
];

fn photo(name: &str) -> OwnedFrame {
    let bytes = std::fs::read(test_assets("photos").join(name)).unwrap();
    frame_from_encoded(name, &bytes, 40_000_000).unwrap()
}

/// What each frame asks, varied: everything; boxes only with crops; the
/// largest two faces.
fn wanted(i: usize) -> Wanted {
    match i % 3 {
        0 => Wanted::all(64),
        1 => Wanted {
            embeddings: false,
            crops: true,
            ..Wanted::all(64)
        },
        _ => Wanted {
            max_faces: Some(2),
            ..Wanted::all(64)
        },
    }
}

/// The same faces: boxes and landmarks within 1 px, embeddings within a
/// cosine distance of 0.005, the same crops.
fn assert_same(got: &Analysis, want: &Analysis, what: &str) {
    assert_eq!(got.faces.len(), want.faces.len(), "{what}: faces");
    for (a, b) in got.faces.iter().zip(&want.faces) {
        let corners = |f: &Face| [f.bbox.left, f.bbox.top, f.bbox.right, f.bbox.bottom];
        let points = |f: &Face| f.landmarks.concat();
        for (x, y) in
            (corners(a).into_iter().chain(points(a))).zip(corners(b).into_iter().chain(points(b)))
        {
            assert!((x - y).abs() <= 1.0, "{what}: {x} against {y}");
        }
        assert_eq!(a.embedding.len(), b.embedding.len(), "{what}");
        if !a.embedding.is_empty() {
            let distance = Metric::Cosine.distance(&a.embedding, &b.embedding);
            assert!(distance <= 0.005, "{what}: embeddings {distance} apart");
        }
        assert_eq!(
            a.crop.as_ref().map(|c| &c.rgb),
            b.crop.as_ref().map(|c| &c.rgb),
            "{what}: crops"
        );
    }
}

fn one_at_a_time(engine: &mut OnnxEngine, frames: &[(&Frame, Wanted)]) -> Vec<Result<Analysis>> {
    frames
        .iter()
        .map(|&item| engine.analyze(&[item]).pop().unwrap())
        .collect()
}

#[test]
fn a_batch_answers_as_one_frame_at_a_time() {
    let photos: Vec<Frame> = PHOTOS.iter().map(|p| photo(p)).collect();
    let mut batched = engine(32, true);
    let mut alone = engine(1, false);
    assert!(batched.batches() && !alone.batches());
    for n in [1, 2, 7, 33] {
        let frames: Vec<(&Frame, Wanted)> = (0..n)
            .map(|i| (&photos[i % photos.len()], wanted(i)))
            .collect();
        let want = one_at_a_time(&mut alone, &frames);
        let got = batched.analyze(&frames);
        assert_eq!(got.len(), n);
        let mut faces = 0;
        for (i, (got, want)) in got.iter().zip(&want).enumerate() {
            let (got, want) = (got.as_ref().unwrap(), want.as_ref().unwrap());
            assert_same(got, want, &format!("{n} frames, frame {i}"));
            faces += got.faces.len();
        }
        // 33 frames: the detector in two runs, and more faces than one run takes.
        assert!(n < 33 || faces > 32, "{n} frames: {faces} faces");
    }
}

/// MediaPipe's BlazeFace (its batch of 1 freed) and the sample embedder:
/// no landmark model, the detector's own points; `locate` for the points at
/// a tracker's box.
fn blazeface(max_engine_batch: usize) -> OnnxEngine {
    let models = test_assets("onnx");
    let settings = OnnxSettings {
        detector_model: models.join("face_detection_front_128x128_barracuda.onnx"),
        embedder_model: models.join("fr_feature.onnx"),
        max_engine_batch: Some(max_engine_batch),
        free_batch: true,
        ..OnnxSettings::defaults(&models)
    };
    OnnxEngine::load(&settings).unwrap_or_else(|e| panic!("{e}: run scripts/setup.sh"))
}

#[test]
fn a_family_with_points_batches_as_it_runs_alone() {
    let photos: Vec<Frame> = PHOTOS.iter().map(|p| photo(p)).collect();
    let mut batched = blazeface(8);
    let mut alone = blazeface(1);
    let log = batched.describe();
    assert!(log.contains("blazeface detector") && log.contains("five points from the detector"));
    assert!(batched.batches(), "{log}");
    // No crops: a run of several items may round a point a hair otherwise
    // than one alone (within the pixel assert_same allows), and a crop
    // compares pixel for pixel.
    let frames: Vec<(&Frame, Wanted)> = (0..7)
        .map(|i| {
            let wanted = Wanted {
                crops: false,
                ..wanted(i)
            };
            (&photos[i % photos.len()], wanted)
        })
        .collect();
    let want = one_at_a_time(&mut alone, &frames);
    let mut faces = 0;
    for (i, (got, want)) in batched.analyze(&frames).iter().zip(&want).enumerate() {
        let (got, want) = (got.as_ref().unwrap(), want.as_ref().unwrap());
        assert_same(got, want, &format!("frame {i}"));
        faces += got.faces.len();
    }
    assert!(faces >= 4, "{faces} faces");
    // The points at the faces' boxes (a tracker's), from the detector on the
    // region around each: near the ones it found, in a batch of regions.
    let obama = &photos[0];
    let found = alone
        .analyze(&[(obama, Wanted::all(8))])
        .pop()
        .unwrap()
        .unwrap();
    let boxes: Vec<BoxPx> = found.faces.iter().map(|f| f.bbox).collect();
    let asked = [(obama, boxes.clone()), (obama, boxes)];
    for located in batched.faces_at_many(&asked) {
        for (at, face) in located.unwrap().iter().zip(&found.faces) {
            let worst = (at.landmarks.iter().flatten())
                .zip(face.landmarks.iter().flatten())
                .map(|(a, b)| (a - b).abs())
                .fold(0.0f32, f32::max);
            // The region shows the face larger than the frame does: its
            // points differ as two looks do, within a tenth of the face.
            let side = face.bbox.right - face.bbox.left;
            assert!(
                worst < 0.1 * side,
                "points {worst} px from the detected ones ({side} px face)"
            );
        }
    }
}

#[test]
fn a_fixed_batch_runs_one_item_at_a_time_unless_freed() {
    let photos: Vec<Frame> = PHOTOS.iter().map(|p| photo(p)).collect();
    let frames: Vec<(&Frame, Wanted)> = photos.iter().map(|p| (p, Wanted::all(64))).collect();
    let mut fixed = engine(32, false);
    let mut freed = engine(32, true);
    assert!(!fixed.batches());
    for (i, (a, b)) in fixed
        .analyze(&frames)
        .iter()
        .zip(freed.analyze(&frames))
        .enumerate()
    {
        assert_same(a.as_ref().unwrap(), &b.unwrap(), PHOTOS[i]);
    }
    let log = fixed.describe();
    assert!(
        log.contains("; one item a run: detector (its batch fixed in the file), "),
        "{log}"
    );
    let log = freed.describe();
    assert!(
        log.contains("; batched, up to 32 items a run: detector (its batch of 1 freed at load)"),
        "{log}"
    );
}

/// The published embedder with only its input's batch declared free: its
/// Reshape to [1, -1] still folds a run into one row. The load finds it
/// out; the model runs one face at a time and answers right.
#[test]
fn a_model_whose_graph_pins_its_declared_free_batch_runs_one_at_a_time() {
    use prost::Message;
    let path = test_assets("onnx/fr_feature.onnx");
    let mut model =
        tract_onnx::pb::ModelProto::decode(std::fs::read(&path).unwrap().as_slice()).unwrap();
    let input = &mut model.graph.as_mut().unwrap().input[0];
    let Some(tract_onnx::pb::type_proto::Value::TensorType(t)) =
        input.r#type.as_mut().and_then(|t| t.value.as_mut())
    else {
        panic!("fr_feature.onnx: no tensor input");
    };
    t.shape.as_mut().unwrap().dim[0].value =
        Some(tract_onnx::pb::tensor_shape_proto::dimension::Value::DimParam("N".into()));
    let dir = tempfile::tempdir().unwrap();
    let pinned = dir.path().join("pinned.onnx");
    std::fs::write(&pinned, model.encode_to_vec()).unwrap();
    let mut engine = engine_of(&pinned, 32, false);
    let log = engine.describe();
    assert!(
        log.contains("embedder (a run of two failed: model output 0 has shape [1, 1024]"),
        "{log}"
    );
    let (obama, biden) = (photo("obama.jpg"), photo("biden.jpg"));
    let frames = [(&obama, Wanted::all(8)), (&biden, Wanted::all(8))];
    let want = one_at_a_time(&mut engine_of(&path, 1, false), &frames);
    for (got, want) in engine.analyze(&frames).iter().zip(&want) {
        assert_same(got.as_ref().unwrap(), want.as_ref().unwrap(), "pinned");
    }
}

#[test]
fn a_failed_frame_fails_alone() {
    let (obama, group, biden) = (
        photo("obama.jpg"),
        photo("group5_480.jpg"),
        photo("biden.jpg"),
    );
    let broken = Frame {
        width: 640,
        height: 480,
        rgb: vec![0; 100].into(),
    };
    let at_most_two = Wanted::all(2);
    let frames = [
        (&obama, Wanted::all(64)),
        (&group, at_most_two),
        (&broken, Wanted::all(64)),
        (&biden, Wanted::all(64)),
    ];
    let mut batched = engine(32, true);
    let got = batched.analyze(&frames);
    let want = one_at_a_time(&mut engine(1, false), &frames);
    let too_many = got[1].as_ref().unwrap_err();
    assert_eq!(too_many.kind(), ErrorKind::InvalidInput, "{too_many}");
    assert!(got[2].is_err(), "a frame of 100 bytes for 640x480");
    for i in [0, 3] {
        let (got, want) = (got[i].as_ref().unwrap(), want[i].as_ref().unwrap());
        assert_eq!(got.faces.len(), 1);
        assert_same(got, want, &format!("frame {i}"));
    }
}

/// `count` inputs of `len` values in [0, 1), different in every item.
fn inputs(count: usize, len: usize) -> Vec<Vec<f32>> {
    (0..count)
        .map(|i| {
            (0..len)
                .map(|v| ((v * (i + 3)) % 251) as f32 / 251.0)
                .collect()
        })
        .collect()
}

/// A fill that appends an input as it is, and refuses `refused`.
fn refusing(refused: &[f32]) -> impl Fn(&Vec<f32>, &mut Vec<f32>) -> Result<()> + Sync + Copy + '_ {
    move |input, data| {
        if input.as_slice() == refused {
            return Err(Error::invalid("no input for this one"));
        }
        data.extend(input);
        Ok(())
    }
}

/// A run the model refuses (here: three items for a model whose batch is
/// fixed, told it is free) is run again item by item; an item whose input
/// cannot be made fails alone.
#[test]
fn a_run_that_fails_is_run_again_one_item_at_a_time() {
    let mut net = net("fr_feature.onnx", Batching::AsDeclared);
    assert_eq!(net.batch, BatchDim::Fixed);
    net.batch = BatchDim::Free;
    let chips = inputs(4, 3 * 112 * 112);
    let fill = refusing(&chips[2]);
    net.most = 4;
    let together = net.run_items(&chips, fill);
    net.most = 1;
    let alone = net.run_items(&chips, fill);
    assert_eq!(together.len(), 4);
    for (i, (a, b)) in together.iter().zip(&alone).enumerate() {
        match i {
            2 => assert!(a.is_err() && b.is_err()),
            _ => assert_eq!(a.as_ref().unwrap(), b.as_ref().unwrap(), "item {i}"),
        }
    }
}

/// A run's items filled on several threads (as on a GPU) answer as filled
/// on one; an item whose fill fails fails alone, and a fill that panics
/// fails the items of its thread only.
#[test]
fn items_filled_on_several_threads_answer_as_on_one() {
    let mut net = net("fr_landmark.onnx", Batching::Freed);
    net.most = 8;
    let crops = inputs(7, 64 * 64);
    let fill = refusing(&crops[1]);
    let serial = net.run_items(&crops, fill);
    let same = |got: &[Result<ItemOutputs>], i: usize, what: &str| {
        assert_eq!(
            got[i].as_ref().unwrap(),
            serial[i].as_ref().unwrap(),
            "{what}, item {i}"
        )
    };
    for threads in [2, 3, 7, 16] {
        net.fill_threads = threads;
        let got = net.run_items(&crops, fill);
        assert_eq!(got.len(), 7, "{threads} threads");
        assert!(got[1].is_err(), "{threads} threads");
        (0..7)
            .filter(|&i| i != 1)
            .for_each(|i| same(&got, i, &format!("{threads} threads")));
    }
    // Three threads take items 0-2 (the calling one), 3-5 and 6.
    net.fill_threads = 3;
    let panics = |crop: &Vec<f32>, data: &mut Vec<f32>| {
        assert!(crop[1] != crops[4][1], "a fill that panics");
        fill(crop, data)
    };
    let got = net.run_items(&crops, panics);
    for (i, failed) in got.iter().enumerate().take(6).skip(3) {
        let why = failed.as_ref().unwrap_err().message();
        assert!(why.contains("panicked"), "item {i}: {why}");
    }
    [0, 2, 6]
        .into_iter()
        .for_each(|i| same(&got, i, "beside a panic"));
}

/// Planned (as on a GPU): each run padded with blank items to the next
/// planned size, on that size's own session; the blank items' outputs are
/// dropped, the others' are those of a run without them.
#[test]
fn a_padded_run_answers_as_an_unpadded_one() {
    let mut net = net("fr_landmark.onnx", Batching::Freed);
    assert_eq!(net.batch, BatchDim::Freed);
    let crops = inputs(5, 64 * 64);
    let fill = refusing(&[]);
    net.most = 8;
    let plain = net.run_items(&crops, fill);
    net.plan(&[1, 2, 4, 8]).unwrap();
    for (items, want) in [(5, vec![(1, 1), (2, 1), (4, 1), (8, 2)]), (3, vec![(4, 2)])] {
        let padded = net.run_items(&crops[..items], fill);
        assert_eq!(padded.len(), items);
        for (a, b) in padded.iter().zip(&plain) {
            assert_eq!(a.as_ref().unwrap(), b.as_ref().unwrap(), "{items} items");
        }
        // Each size's session ran once at load, then the runs asked of it.
        let (runs, refused) = net.planned_runs();
        assert!(want.iter().all(|w| runs.contains(w)), "{runs:?}");
        assert_eq!(refused, 0);
    }
    assert_eq!(
        (net.padded(5), net.padded(3), net.padded(1), net.padded(0)),
        (8, 4, 1, 0)
    );
    assert_eq!(net.per_run(), 8);
}

/// A planned model refuses a run at a shape it has no session for (and
/// counts it) rather than run it there.
#[test]
fn a_planned_model_runs_no_shape_it_has_not_planned() {
    let mut net = net("fr_landmark.onnx", Batching::Freed);
    net.plan(&[1, 4]).unwrap();
    let mut shape = net.shape.clone();
    shape[0] = 3;
    let err = net.run(&super::blob::Blob::zeros(&shape)).err().unwrap();
    assert!(err.message().contains("no session planned"), "{err}");
    assert_eq!(net.planned_runs(), (vec![(1, 1), (4, 1)], 1));
}

/// The sample pipeline planned for runs of 1, 4 and 8 on the CPU provider
/// (as a GPU plans them): every request mix answers as one frame at a time,
/// each model's sessions run only their own shape, and every size is used.
#[test]
fn planned_sessions_answer_as_one_frame_at_a_time() {
    let photos: Vec<Frame> = PHOTOS.iter().map(|p| photo(p)).collect();
    let models = test_assets("onnx");
    let settings = OnnxSettings {
        landmark_model: Some(models.join("fr_landmark.onnx")),
        detector_model: models.join("fr_detect.onnx"),
        embedder_model: models.join("fr_feature.onnx"),
        max_engine_batch: Some(8),
        free_batch: true,
        run_sizes: Some(vec![1, 4, 8]),
        // As on a GPU: each run's items filled on several threads.
        fill_threads: 3,
        ..OnnxSettings::defaults(&models)
    };
    let mut planned = OnnxEngine::load(&settings).unwrap();
    let mut alone = engine(1, false);
    for n in [1, 2, 3, 6, 11] {
        let frames: Vec<(&Frame, Wanted)> = (0..n)
            .map(|i| (&photos[(i * 3) % photos.len()], wanted(i)))
            .collect();
        let want = one_at_a_time(&mut alone, &frames);
        for (i, (got, want)) in planned.analyze(&frames).iter().zip(&want).enumerate() {
            let (got, want) = (got.as_ref().unwrap(), want.as_ref().unwrap());
            assert_same(got, want, &format!("{n} frames, frame {i}"));
        }
    }
    for (what, net) in planned.nets() {
        let (runs, refused) = net.planned_runs();
        assert_eq!(refused, 0, "{what}: runs at a shape not planned");
        let sizes: Vec<usize> = runs.iter().map(|r| r.0).collect();
        assert_eq!(sizes, [1, 4, 8], "{what}");
        assert!(runs.iter().all(|&(_, n)| n > 1), "{what}: {runs:?}");
    }
}

/// The followed frames of several sequences: landmarks at trackers' boxes
/// and embeddings, for several frames in one call, as one frame at a time.
#[test]
fn several_frames_landmarks_and_embeddings_as_one_at_a_time() {
    let photos: Vec<Frame> = ["obama.jpg", "group5_480.jpg", "biden.jpg"]
        .iter()
        .map(|p| photo(p))
        .collect();
    let mut batched = engine(32, true);
    let mut alone = engine(1, false);
    let found: Vec<Vec<Face>> = (photos.iter())
        .map(|p| {
            alone
                .analyze(&[(p, Wanted::all(64))])
                .pop()
                .unwrap()
                .unwrap()
                .faces
        })
        .collect();
    let asked: Vec<(&Frame, Vec<BoxPx>)> = (photos.iter().zip(&found))
        .map(|(p, faces)| (p, faces.iter().map(|f| f.bbox).collect()))
        .collect();
    let located = batched.faces_at_many(&asked);
    for ((frame, boxes), got) in asked.iter().zip(&located) {
        let want = alone.faces_at(frame, boxes).unwrap();
        assert_eq!(got.as_ref().unwrap().len(), want.len());
        for (a, b) in got.as_ref().unwrap().iter().zip(&want) {
            assert_eq!(a.landmarks, b.landmarks);
        }
    }
    let asked: Vec<(&Frame, Vec<&Face>)> = (photos.iter().zip(&found))
        .map(|(p, faces)| (p, faces.iter().collect()))
        .collect();
    let embedded = batched.embed_many(&asked);
    for ((frame, faces), got) in asked.iter().zip(embedded) {
        let want = alone.embed(frame, faces).unwrap();
        for (a, b) in got.unwrap().iter().zip(&want) {
            assert!(Metric::Cosine.distance(a, b) <= 0.005);
        }
    }
}

/// `embedder_template`: ArcFace's points given explicitly align as the
/// default does; moved 6 px right, the face moves 6 px right in the chip; a
/// point outside the embedder's input is refused at load.
#[test]
fn the_embedder_template_places_the_face() {
    use crate::pipeline::align::ARCFACE_112;
    let models = test_assets("onnx");
    let load = |template: Option<crate::pipeline::align::Five>| {
        let mut settings = OnnxSettings {
            landmark_model: Some(models.join("fr_landmark.onnx")),
            detector_model: models.join("fr_detect.onnx"),
            embedder_model: models.join("fr_feature.onnx"),
            ..OnnxSettings::defaults(&models)
        };
        settings.embedder.template = template;
        OnnxEngine::load(&settings)
    };
    let frame = photo("obama.jpg");
    let chip = |template| {
        let wanted = Wanted {
            crops: true,
            ..Wanted::all(64)
        };
        let mut engine = load(template).unwrap();
        let analysis = engine.analyze(&[(&frame, wanted)]).pop().unwrap().unwrap();
        analysis.faces[0].crop.clone().unwrap()
    };
    let default = chip(None);
    assert_eq!(chip(Some(ARCFACE_112)).rgb, default.rgb);
    let moved = chip(Some(ARCFACE_112.map(|[x, y]| [x + 6.0, y])));
    let row = (default.width * 3) as usize;
    let differs = (20..90)
        .flat_map(|y| (20..90).map(move |x| (y, x)))
        .map(|(y, x)| {
            let at = |f: &Frame, x: usize| i32::from(f.rgb[y * row + x * 3]);
            (at(&moved, x + 6) - at(&default, x)).abs()
        })
        .max()
        .unwrap();
    assert!(differs <= 2, "moved chip differs by {differs} levels");
    let outside = ARCFACE_112.map(|[x, y]| [x + 80.0, y]);
    let err = load(Some(outside))
        .err()
        .expect("a point outside the input loads");
    assert!(err.to_string().contains("embedder_template"), "{err}");
}
