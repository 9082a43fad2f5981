// triton-face's fence around dlib: every entry point runs its dlib calls
// inside guarded(), which turns any C++ exception into a return code and a
// message. An exception unwinding into Rust would abort tritonserver.

#include "shim.h"

#include <dlfcn.h>
#include <link.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <new>
#include <stdexcept>
#include <string>
#include <vector>

#include <dlib/dnn.h>
#include <dlib/image_processing/correlation_tracker.h>
#include <dlib/image_processing/frontal_face_detector.h>
#include <dlib/image_processing/full_object_detection.h>
#include <dlib/image_processing/shape_predictor.h>
#include <dlib/image_transforms.h>

// OpenBLAS's own control (cblas.h would clash with dlib's BLAS bindings).
extern "C" void openblas_set_num_threads(int threads);

namespace {

// The networks exactly as dlib defines them (examples/dnn_mmod_face_detection_ex.cpp
// and examples/dnn_face_recognition_ex.cpp); the weights deserialize only into these.
template <long num_filters, typename SUBNET> using con5d = dlib::con<num_filters, 5, 5, 2, 2, SUBNET>;
template <long num_filters, typename SUBNET> using con5 = dlib::con<num_filters, 5, 5, 1, 1, SUBNET>;
template <typename SUBNET>
using downsampler = dlib::relu<dlib::affine<con5d<32, dlib::relu<dlib::affine<
    con5d<32, dlib::relu<dlib::affine<con5d<16, SUBNET>>>>>>>>>;
template <typename SUBNET> using rcon5 = dlib::relu<dlib::affine<con5<45, SUBNET>>>;
using mmod_net = dlib::loss_mmod<dlib::con<1, 9, 9, 1, 1, rcon5<rcon5<rcon5<
    downsampler<dlib::input_rgb_image_pyramid<dlib::pyramid_down<6>>>>>>>>;

template <template <int, template <typename> class, int, typename> class block, int N,
          template <typename> class BN, typename SUBNET>
using residual = dlib::add_prev1<block<N, BN, 1, dlib::tag1<SUBNET>>>;
template <template <int, template <typename> class, int, typename> class block, int N,
          template <typename> class BN, typename SUBNET>
using residual_down = dlib::add_prev2<dlib::avg_pool<2, 2, 2, 2,
    dlib::skip1<dlib::tag2<block<N, BN, 2, dlib::tag1<SUBNET>>>>>>;
template <int N, template <typename> class BN, int stride, typename SUBNET>
using block = BN<dlib::con<N, 3, 3, 1, 1, dlib::relu<BN<dlib::con<N, 3, 3, stride, stride, SUBNET>>>>>;
template <int N, typename SUBNET> using ares = dlib::relu<residual<block, N, dlib::affine, SUBNET>>;
template <int N, typename SUBNET> using ares_down = dlib::relu<residual_down<block, N, dlib::affine, SUBNET>>;
template <typename SUBNET> using alevel0 = ares_down<256, SUBNET>;
template <typename SUBNET> using alevel1 = ares<256, ares<256, ares_down<256, SUBNET>>>;
template <typename SUBNET> using alevel2 = ares<128, ares<128, ares_down<128, SUBNET>>>;
template <typename SUBNET> using alevel3 = ares<64, ares<64, ares<64, ares_down<64, SUBNET>>>>;
template <typename SUBNET> using alevel4 = ares<32, ares<32, ares<32, SUBNET>>>;
using resnet = dlib::loss_metric<dlib::fc_no_bias<128, dlib::avg_pool_everything<
    alevel0<alevel1<alevel2<alevel3<alevel4<dlib::max_pool<3, 3, 2, 2, dlib::relu<dlib::affine<
    dlib::con<32, 7, 7, 2, 2, dlib::input_rgb_image_sized<150>>>>>>>>>>>>>;

using image_t = dlib::matrix<dlib::rgb_pixel>;

// Thrown by our own checks: the caller's input, not dlib, is at fault.
struct bad_input : std::runtime_error {
    using std::runtime_error::runtime_error;
};

void set_error(char *err, size_t len, const char *what) {
    if (err == nullptr || len == 0) return;
    std::strncpy(err, what, len - 1);
    err[len - 1] = '\0';
}

// The loaded libdlib's path (dl_iterate_phdr callback).
int find_libdlib(struct dl_phdr_info *info, size_t, void *out) {
    if (info->dlpi_name == nullptr || std::strstr(info->dlpi_name, "/libdlib.so") == nullptr)
        return 0;
    *static_cast<std::string *>(out) = info->dlpi_name;
    return 1;
}

// dlib aborts the process on its second fatal_error ("the first was
// inappropriately ignored", dlib/error.h). We do not ignore one: it becomes
// that call's error, so we re-arm the check. Its flag is a static local of an
// inline function: this file is built with DLIB_NO_ABORT_ON_2ND_FATAL_ERROR
// for the copies instantiated here, and libdlib.so exports its own copy as a
// unique symbol, which we reset. Without the symbol (another dlib build) a
// second fatal_error from inside libdlib.so still aborts.
void rearm_dlib_fatal_error_check() {
    static bool *const flag = [] {
        std::string path;
        dl_iterate_phdr(find_libdlib, &path);
        void *lib = path.empty() ? nullptr : dlopen(path.c_str(), RTLD_NOW | RTLD_NOLOAD);
        return lib == nullptr ? nullptr : static_cast<bool *>(dlsym(lib,
            "_ZZN4dlib11fatal_error31check_for_previous_fatal_errorsEvE20is_first_fatal_error"));
    }();
    if (flag != nullptr) *flag = true;
}

// Runs `body` (which returns TF_OK) and maps every exception to a code.
template <typename F> int guarded(char *err, size_t len, F &&body) noexcept {
    try {
        return body();
    } catch (const dlib::fatal_error &e) {
        set_error(err, len, e.what());
        rearm_dlib_fatal_error_check();
        return TF_EXCEPTION;
    } catch (const bad_input &e) {
        set_error(err, len, e.what());
        return TF_BAD_INPUT;
    } catch (const std::bad_alloc &e) {
        set_error(err, len, "out of memory");
        return TF_NO_MEMORY;
    } catch (const std::exception &e) {
        set_error(err, len, e.what());
        return TF_EXCEPTION;
    } catch (...) {
        set_error(err, len, "unknown C++ exception");
        return TF_EXCEPTION;
    }
}

template <typename T> void require(const T *p, const char *what) {
    if (p == nullptr) throw bad_input(std::string(what) + " is null");
}

}  // namespace

struct tf_detector {
    std::unique_ptr<dlib::frontal_face_detector> hog;
    std::unique_ptr<mmod_net> cnn;
};
struct tf_predictor {
    dlib::shape_predictor sp;
};
struct tf_encoder {
    resnet net;
};
struct tf_image {
    image_t pixels;
};
struct tf_tracker {
    // dlib's defaults: a 64x64 position filter over 32 feature channels
    // (4.8 MB a tracker). A 32x32 one (1.6 MB, 3.4 ms an update instead of
    // 5.4) named 0.955 of the sample video's person-frames instead of 0.972.
    dlib::correlation_tracker tracker;
};

namespace {

// Input the MMOD network cannot take, refused before dlib sees it (this is not
// a size policy: everything that passes runs). dlib 19.24's input layer tiles
// the image and its pyramid_down<6> copies into one tensor, and two inputs
// break it:
// 1. Images narrower than the pyramid padding (10 px): an unsigned wrap in
//    impl::compute_tiled_image_pyramid_details places the first tile partly
//    outside the tensor (the DLIB_ASSERT that would say so is compiled out),
//    and to_tensor then writes out of bounds: SIGSEGV on 9x4000, silent heap
//    corruption on shorter images. No try/catch can help; we compute the same
//    layout with dlib's own function and refuse tiles outside the tensor.
// 2. Tensors too small for the downsampler's three unpadded 5x5 stride-2
//    convolutions (1x1, 10x6): dlib's DLIB_CASSERT throws dlib::fatal_error,
//    and the second fatal_error in a process aborts it (dlib/error.h).
void check_cnn_input(mmod_net &net, long width, long height) {
    if (width < 1 || height < 1) throw bad_input("empty image");
    const auto &input = dlib::input_layer(net);
    std::vector<dlib::rectangle> tiles;
    long nr = 0, nc = 0;
    dlib::impl::compute_tiled_image_pyramid_details(
        dlib::pyramid_down<6>(), height, width, input.get_pyramid_padding(),
        input.get_pyramid_outer_padding(), tiles, nr, nc);
    const std::string size = std::to_string(width) + "x" + std::to_string(height);
    const dlib::rectangle tensor(nc, nr);
    for (const auto &tile : tiles)
        if (!tensor.contains(tile))
            throw bad_input("the CNN detector cannot take a " + size +
                            " image (dlib's image pyramid does not fit images this narrow)");
    // con5d<..> in mmod_net, three times: 5x5, stride 2, no padding.
    for (int i = 0; i < 3; ++i) {
        if (nr < 5 || nc < 5)
            throw bad_input("the CNN detector cannot take a " + size +
                            " image (too small for its convolutions)");
        nr = (nr - 5) / 2 + 1;
        nc = (nc - 5) / 2 + 1;
    }
}

// The chips dlib's face recognition example feeds its network: 150 x 150,
// padding 0.25, from the 5-point shapes.
std::vector<dlib::chip_details> chips_of(const tf_shape *shapes, size_t count) {
    std::vector<dlib::chip_details> chips;
    for (size_t i = 0; i < count; ++i) {
        const tf_rect &r = shapes[i].rect;
        std::vector<dlib::point> parts;
        for (const tf_point &p : shapes[i].parts) parts.emplace_back(p.x, p.y);
        dlib::full_object_detection shape(dlib::rectangle(r.left, r.top, r.right, r.bottom), parts);
        chips.push_back(dlib::get_face_chip_details(shape, TF_CHIP_SIDE, 0.25));
    }
    return chips;
}

void extract_chips(const image_t &pixels, const tf_shape *shapes, size_t count,
                   dlib::array<image_t> &out) {
    dlib::extract_image_chips(pixels, chips_of(shapes, count), out);
}

// As dlib's Python API (and so face_recognition) upsamples: pyramid_up with
// pyramid_down<2>, boxes mapped back with rect_down.
template <typename Pixels>
std::vector<dlib::rectangle> upsampled(const Pixels &pixels, unsigned upsample,
                                       const std::function<std::vector<dlib::rectangle>(const Pixels &)> &detect) {
    if (upsample == 0) return detect(pixels);
    dlib::pyramid_down<2> pyr;
    Pixels up = pixels;
    for (unsigned i = 0; i < upsample; ++i) dlib::pyramid_up(up, pyr);
    std::vector<dlib::rectangle> boxes = detect(up);
    for (auto &b : boxes) b = dlib::rectangle(pyr.rect_down(b, upsample));
    return boxes;
}

// HOG on the grey levels: the same faces as on the colour channels (all 150
// frames of the sample video, every sample photo), in 0.73 of the time,
// since dlib's fHOG takes each pixel's strongest gradient of three channels.
std::vector<dlib::rectangle> hog_boxes(dlib::frontal_face_detector &hog, const image_t &rgb,
                                       unsigned upsample, double scale) {
    using grey_t = dlib::matrix<unsigned char>;
    grey_t grey;
    dlib::assign_image(grey, rgb);
    if (scale == 1.0)
        return upsampled<grey_t>(grey, upsample, [&](const grey_t &g) { return hog(g); });
    grey_t resized(std::max(1L, std::lround(grey.nr() * scale)),
                   std::max(1L, std::lround(grey.nc() * scale)));
    dlib::resize_image(grey, resized);
    std::vector<dlib::rectangle> boxes;
    for (const auto &b : hog(resized))
        boxes.emplace_back(std::lround(b.left() / scale), std::lround(b.top() / scale),
                           std::lround(b.right() / scale), std::lround(b.bottom() / scale));
    return boxes;
}

std::vector<dlib::rectangle> cnn_boxes(mmod_net &cnn, const image_t &rgb, unsigned upsample) {
    return upsampled<image_t>(rgb, upsample, [&](const image_t &pixels) {
        check_cnn_input(cnn, pixels.nc(), pixels.nr());
        std::vector<dlib::rectangle> boxes;
        for (auto &d : cnn(pixels)) boxes.push_back(d.rect);
        return boxes;
    });
}

}  // namespace

extern "C" {

int tf_hog_new(tf_detector **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        auto d = std::make_unique<tf_detector>();
        d->hog = std::make_unique<dlib::frontal_face_detector>(dlib::get_frontal_face_detector());
        *out = d.release();
        return TF_OK;
    });
}

int tf_cnn_load(const char *path, tf_detector **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(path, "path");
        auto d = std::make_unique<tf_detector>();
        d->cnn = std::make_unique<mmod_net>();
        dlib::deserialize(path) >> *d->cnn;
        *out = d.release();
        return TF_OK;
    });
}

void tf_detector_free(tf_detector *detector) { delete detector; }

int tf_predictor_load(const char *path, tf_predictor **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(path, "path");
        auto p = std::make_unique<tf_predictor>();
        dlib::deserialize(path) >> p->sp;
        if (p->sp.num_parts() != TF_PARTS)
            throw std::runtime_error("shape predictor has " + std::to_string(p->sp.num_parts()) +
                                     " parts, expected 5");
        *out = p.release();
        return TF_OK;
    });
}

void tf_predictor_free(tf_predictor *predictor) { delete predictor; }

int tf_encoder_load(const char *path, tf_encoder **out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(path, "path");
        auto e = std::make_unique<tf_encoder>();
        dlib::deserialize(path) >> e->net;
        *out = e.release();
        return TF_OK;
    });
}

void tf_encoder_free(tf_encoder *encoder) { delete encoder; }

int tf_encoder_xml(const tf_encoder *encoder, const char *path, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(encoder, "encoder");
        require(path, "path");
        std::ofstream out(path);
        dlib::net_to_xml(encoder->net, out);
        out.close();
        if (!out) throw std::runtime_error(std::string("cannot write ") + path);
        return TF_OK;
    });
}

int tf_image_new(const uint8_t *rgb, size_t width, size_t height, tf_image **out, char *err,
                 size_t err_len) {
    static_assert(sizeof(dlib::rgb_pixel) == 3, "rgb_pixel must be packed R, G, B");
    return guarded(err, err_len, [&] {
        require(rgb, "pixels");
        auto img = std::make_unique<tf_image>();
        img->pixels.set_size(static_cast<long>(height), static_cast<long>(width));
        if (width * height > 0) std::memcpy(&img->pixels(0, 0), rgb, width * height * 3);
        *out = img.release();
        return TF_OK;
    });
}

void tf_image_free(tf_image *image) { delete image; }

int tf_detect(tf_detector *detector, const tf_image *image, unsigned upsample, double scale,
              tf_rect *rects, size_t capacity, size_t *found, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(detector, "detector");
        require(image, "image");
        if (upsample > TF_MAX_UPSAMPLE)
            throw bad_input("upsample " + std::to_string(upsample) + " is more than " +
                            std::to_string(TF_MAX_UPSAMPLE));
        if (!(scale >= TF_MIN_SCALE && scale <= TF_MAX_SCALE))
            throw bad_input("scale " + std::to_string(scale) + " is outside " +
                            std::to_string(TF_MIN_SCALE) + " to " + std::to_string(TF_MAX_SCALE));
        if (scale != 1.0 && (upsample > 0 || !detector->hog))
            throw bad_input("a scale is for the HOG detector without upsample");
        std::vector<dlib::rectangle> boxes =
            detector->hog ? hog_boxes(*detector->hog, image->pixels, upsample, scale)
                          : cnn_boxes(*detector->cnn, image->pixels, upsample);
        for (size_t i = 0; i < boxes.size() && i < capacity; ++i) {
            const dlib::rectangle &b = boxes[i];
            rects[i] = tf_rect{b.left(), b.top(), b.right(), b.bottom()};
        }
        *found = boxes.size();
        return TF_OK;
    });
}

void tf_set_blas_threads(int threads) { openblas_set_num_threads(threads); }

int tf_landmarks(const tf_predictor *predictor, const tf_image *image, const tf_rect *rect,
                 tf_shape *out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(predictor, "predictor");
        require(image, "image");
        require(rect, "rect");
        dlib::rectangle box(rect->left, rect->top, rect->right, rect->bottom);
        dlib::full_object_detection shape = predictor->sp(image->pixels, box);
        if (shape.num_parts() != TF_PARTS) throw std::runtime_error("predictor gave no 5 points");
        out->rect = *rect;
        for (unsigned long i = 0; i < TF_PARTS; ++i)
            out->parts[i] = tf_point{shape.part(i).x(), shape.part(i).y()};
        return TF_OK;
    });
}

int tf_encode(tf_encoder *encoder, const tf_image *image, const tf_shape *shapes, size_t count,
              float *out, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(encoder, "encoder");
        require(image, "image");
        if (count == 0) return TF_OK;
        require(shapes, "shapes");
        require(out, "out");
        dlib::array<image_t> faces;
        extract_chips(image->pixels, shapes, count, faces);
        std::vector<dlib::matrix<float, 0, 1>> descriptors = encoder->net(faces, 16);
        if (descriptors.size() != count) throw std::runtime_error("one descriptor per face expected");
        for (size_t i = 0; i < count; ++i) {
            if (descriptors[i].size() != TF_DESCRIPTOR_LEN)
                throw std::runtime_error("descriptor is not 128-d");
            std::memcpy(out + i * TF_DESCRIPTOR_LEN, &descriptors[i](0), TF_DESCRIPTOR_LEN * sizeof(float));
        }
        return TF_OK;
    });
}

int tf_chips(const tf_image *image, const tf_shape *shapes, size_t count, uint8_t *out, char *err,
             size_t err_len) {
    return guarded(err, err_len, [&] {
        require(image, "image");
        if (count == 0) return TF_OK;
        require(shapes, "shapes");
        require(out, "out");
        dlib::array<image_t> faces;
        extract_chips(image->pixels, shapes, count, faces);
        const size_t bytes = TF_CHIP_SIDE * TF_CHIP_SIDE * 3;
        for (size_t i = 0; i < count; ++i) {
            if (faces[i].nr() != TF_CHIP_SIDE || faces[i].nc() != TF_CHIP_SIDE)
                throw std::runtime_error("chip is not TF_CHIP_SIDE square");
            std::memcpy(out + i * bytes, &faces[i](0, 0), bytes);
        }
        return TF_OK;
    });
}

}  // extern "C"

namespace {

// dlib checks these with DLIB_CASSERT (a fatal_error, of which a second one
// aborts the process): refuse them here instead.
void check_track(const tf_image *image, const dlib::drectangle &box) {
    require(image, "image");
    if (image->pixels.size() == 0) throw bad_input("empty image");
    const double sides[] = {box.left(), box.top(), box.right(), box.bottom()};
    for (double v : sides)
        if (!std::isfinite(v)) throw bad_input("the tracked box is not finite");
    if (box.right() - box.left() < 1 || box.bottom() - box.top() < 1)
        throw bad_input("the tracked box is under 1 px a side");
}

}  // namespace

int tf_tracker_start(const tf_image *image, const tf_drect *rect, tf_tracker **out, char *err,
                     size_t err_len) {
    return guarded(err, err_len, [&] {
        require(rect, "rect");
        const dlib::drectangle box(rect->left, rect->top, rect->right, rect->bottom);
        check_track(image, box);
        auto t = std::make_unique<tf_tracker>();
        t->tracker.start_track(image->pixels, box);
        *out = t.release();
        return TF_OK;
    });
}

int tf_tracker_update(tf_tracker *tracker, const tf_image *image, tf_drect *out,
                      double *confidence, char *err, size_t err_len) {
    return guarded(err, err_len, [&] {
        require(tracker, "tracker");
        require(out, "out");
        require(confidence, "confidence");
        check_track(image, tracker->tracker.get_position());
        const double psr = tracker->tracker.update(image->pixels);
        const dlib::drectangle b = tracker->tracker.get_position();
        *out = tf_drect{b.left(), b.top(), b.right(), b.bottom()};
        *confidence = psr;
        return TF_OK;
    });
}

void tf_tracker_free(tf_tracker *tracker) { delete tracker; }
