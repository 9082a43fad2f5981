/* triton-face's C interface to dlib (shim.cpp). Every function catches every
 * C++ exception and reports it through its return code and `err`, so none can
 * unwind into Rust (which would abort tritonserver). */
#ifndef TRITON_FACE_DLIB_SHIM_H
#define TRITON_FACE_DLIB_SHIM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Return codes. */
enum {
    TF_OK = 0,
    /* The shim refused the input before calling dlib (a documented precondition). */
    TF_BAD_INPUT = 1,
    /* dlib threw (std::exception or anything else); `err` holds what(). */
    TF_EXCEPTION = 2,
    /* std::bad_alloc: host memory ran out. */
    TF_NO_MEMORY = 3
};

/* Landmarks per face: the 5-point shape predictor. */
#define TF_PARTS 5
/* Length of a face descriptor (dlib's ResNet). */
#define TF_DESCRIPTOR_LEN 128
/* Side of the aligned face chips the encoder sees (RGB). */
#define TF_CHIP_SIDE 150
/* Each upsampling step quadruples the pixels the detector scans. */
#define TF_MAX_UPSAMPLE 3
/* The frontal HOG detector's window: the smallest face it finds in an image
 * as it is, in pixels. */
#define TF_HOG_WINDOW 80
/* How far tf_detect resizes an image for HOG: 4 finds faces of 20 px (an
 * image of 16 times the pixels, as upsample 2); 0.1 looks from 800 px. */
#define TF_MIN_SCALE 0.1
#define TF_MAX_SCALE 4.0

typedef struct tf_detector tf_detector;
typedef struct tf_predictor tf_predictor;
typedef struct tf_encoder tf_encoder;
typedef struct tf_image tf_image;
typedef struct tf_tracker tf_tracker;

/* dlib::rectangle: inclusive pixel bounds. */
typedef struct tf_rect {
    long left, top, right, bottom;
} tf_rect;

/* A box in sub-pixel units (a tracker's estimate). */
typedef struct tf_drect {
    double left, top, right, bottom;
} tf_drect;

typedef struct tf_point {
    long x, y;
} tf_point;

/* One face: its box and the predictor's 5 points. */
typedef struct tf_shape {
    tf_rect rect;
    tf_point parts[TF_PARTS];
} tf_shape;

/* On error, every function writes a NUL-terminated message of at most
 * err_len bytes into `err` and leaves *out untouched. */

int tf_hog_new(tf_detector **out, char *err, size_t err_len);
/* mmod_human_face_detector.dat. */
int tf_cnn_load(const char *path, tf_detector **out, char *err, size_t err_len);
void tf_detector_free(tf_detector *detector);

/* shape_predictor_5_face_landmarks.dat; any other part count is refused. */
int tf_predictor_load(const char *path, tf_predictor **out, char *err, size_t err_len);
void tf_predictor_free(tf_predictor *predictor);

/* dlib_face_recognition_resnet_model_v1.dat. */
int tf_encoder_load(const char *path, tf_encoder **out, char *err, size_t err_len);
void tf_encoder_free(tf_encoder *encoder);
/* The network, its layers and weights, as dlib's net_to_xml writes them. */
int tf_encoder_xml(const tf_encoder *encoder, const char *path, char *err, size_t err_len);

/* Copies width*height interleaved 8-bit RGB pixels, row-major. */
int tf_image_new(const uint8_t *rgb, size_t width, size_t height, tf_image **out,
                 char *err, size_t err_len);
void tf_image_free(tf_image *image);

/* Faces in `image`, after doubling its size `upsample` times (at most
 * TF_MAX_UPSAMPLE), or else resizing it by `scale` (HOG only; 1: as it is;
 * TF_MIN_SCALE to TF_MAX_SCALE); boxes are in the original image. HOG scans
 * the image's grey levels. *found gets how many dlib found; the first
 * min(found, capacity) boxes are written to `rects`. */
int tf_detect(tf_detector *detector, const tf_image *image, unsigned upsample, double scale,
              tf_rect *rects, size_t capacity, size_t *found, char *err, size_t err_len);

/* Threads OpenBLAS (the CPU networks' matrix products) may use in this
 * process. */
void tf_set_blas_threads(int threads);

/* The 5 landmarks of the face in `rect`; out->rect = *rect. */
int tf_landmarks(const tf_predictor *predictor, const tf_image *image,
                 const tf_rect *rect, tf_shape *out, char *err, size_t err_len);

/* Descriptors of `count` faces of one image (150x150 chips, padding 0.25, no
 * jitter), one network call; `out` holds count * TF_DESCRIPTOR_LEN floats. */
int tf_encode(tf_encoder *encoder, const tf_image *image, const tf_shape *shapes,
              size_t count, float *out, char *err, size_t err_len);

/* The aligned chips tf_encode feeds the network: `out` holds
 * count * TF_CHIP_SIDE * TF_CHIP_SIDE * 3 bytes, RGB, row-major. */
int tf_chips(const tf_image *image, const tf_shape *shapes, size_t count, uint8_t *out,
             char *err, size_t err_len);

/* dlib's correlation tracker (DSST: position and scale), started on `rect`
 * of `image`; the box must be finite and at least 1 px on each side. */
int tf_tracker_start(const tf_image *image, const tf_drect *rect, tf_tracker **out, char *err,
                     size_t err_len);
/* The tracked box in the next image, and the peak-to-sidelobe ratio of the
 * correlation (dlib: below about 7, the target is likely lost). */
int tf_tracker_update(tf_tracker *tracker, const tf_image *image, tf_drect *out,
                      double *confidence, char *err, size_t err_len);
void tf_tracker_free(tf_tracker *tracker);

#ifdef __cplusplus
}
#endif

#endif
