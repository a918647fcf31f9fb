/*
 * Optional CPU kernels for ignite_r3net (built by setup.py when a C compiler is present; every
 * caller falls back to its torch / numpy path when this module is missing).
 *
 *   edt_sq(fg, out, h, w)
 *       Exact squared Euclidean distance of every pixel to the nearest nonzero pixel of the
 *       uint8 map ``fg`` (h * w, row-major), written as int32 into ``out``. Felzenszwalb &
 *       Huttenlocher: per-column distances, then the lower envelope of parabolas along rows.
 *       Breakpoints are quotients of integers with denominators <= 2w, so their float64
 *       comparisons are those of the exact rationals. Output: int32 (INT32_MAX everywhere in a
 *       map without a nonzero pixel).
 *
 *   rotate_normalize(images, masks, angles, scale, shift, out_images, out_masks, n, c, cm, h, w)
 *       For each of n samples: rotate the planar uint8 image (c, h, w)
 *       counter-clockwise by angles[i] degrees about its centre, bilinear with zeros outside, and
 *       write value * scale[ch] + shift[ch] as planar float32 (c, h, w); rotate the planar uint8
 *       mask (cm, h, w) with nearest-neighbour sampling (ties to even) and write value / 255.
 *       The sampling points are those of torch.nn.functional.grid_sample(align_corners=False) on
 *       the grid of ignite_r3net.data.transforms._rotation_grid, so this equals the torch path up
 *       to float rounding; it reads uint8 and writes the float once.
 *
 *   decay_sum(pred, d2, lut, table)
 *       sum over pixels of lut[pred] * table[d2] in float64, in pixel order: the weighted
 *       F-measure's distance-decayed term without two full-size gathers.
 *
 *   crop_planar(src, out, h, w, c, y0, x0, size_h, size_w, flip)
 *       out (c, size_h, size_w) = the window of the channels-last uint8 image src (h, w, c) at
 *       (y0, x0), columns mirrored when flip: the crop, flip and layout change of a training
 *       sample in one pass (16 pixels per SSSE3 shuffle step).
 *
 * All release the GIL while they compute.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

/* ------------------------------------------------------------------------------------------ */
/* exact squared Euclidean distance transform                                                  */

static int edt_sq_impl(const uint8_t *fg, int32_t *out, Py_ssize_t h, Py_ssize_t w)
{
    Py_ssize_t *near = (Py_ssize_t *)malloc(sizeof(Py_ssize_t) * (size_t)w);
    Py_ssize_t *v = (Py_ssize_t *)malloc(sizeof(Py_ssize_t) * (size_t)w);
    double *z = (double *)malloc(sizeof(double) * (size_t)(w + 1));
    double *f = (double *)malloc(sizeof(double) * (size_t)w);
    if (!near || !v || !z || !f) {
        free(near); free(v); free(z); free(f);
        return -1;
    }
    const Py_ssize_t none = -1;
    const int32_t far = (int32_t)(h + w + 1); /* farther than any distance in the map */

    /* column pass, row by row (row-major friendly): rows to the nearest feature above ... */
    for (Py_ssize_t c = 0; c < w; c++) near[c] = none;
    for (Py_ssize_t r = 0; r < h; r++) {
        const uint8_t *row = fg + r * w;
        int32_t *o = out + r * w;
        for (Py_ssize_t c = 0; c < w; c++) {
            if (row[c]) near[c] = r;
            o[c] = near[c] == none ? far : (int32_t)(r - near[c]);
        }
    }
    /* ... and below; then squared, -1 marking a column without a feature */
    for (Py_ssize_t c = 0; c < w; c++) near[c] = none;
    for (Py_ssize_t r = h - 1; r >= 0; r--) {
        const uint8_t *row = fg + r * w;
        int32_t *o = out + r * w;
        for (Py_ssize_t c = 0; c < w; c++) {
            if (row[c]) near[c] = r;
            int32_t d = o[c];
            if (near[c] != none && (int32_t)(near[c] - r) < d) d = (int32_t)(near[c] - r);
            o[c] = d >= far ? -1 : d * d;
        }
    }
    /* row pass: lower envelope of the parabolas (c - j)^2 + f[j] over the feature columns j */
    for (Py_ssize_t r = 0; r < h; r++) {
        int32_t *o = out + r * w;
        Py_ssize_t k = -1;
        for (Py_ssize_t j = 0; j < w; j++) {
            f[j] = (double)o[j];
            if (o[j] < 0) continue;
            double gj = f[j] + (double)j * (double)j;
            double s = -HUGE_VAL;
            while (k >= 0) {
                Py_ssize_t q = v[k];
                s = (gj - (f[q] + (double)q * (double)q)) / (2.0 * (double)(j - q));
                if (s <= z[k]) k--;
                else break;
            }
            k++;
            v[k] = j;
            z[k] = k == 0 ? -HUGE_VAL : s;
        }
        if (k < 0) { /* no feature in the whole map */
            for (Py_ssize_t c = 0; c < w; c++) o[c] = INT32_MAX;
            continue;
        }
        z[k + 1] = HUGE_VAL;
        Py_ssize_t m = 0;
        for (Py_ssize_t c = 0; c < w; c++) {
            while (z[m + 1] < (double)c) m++;
            Py_ssize_t d = c - v[m];
            o[c] = (int32_t)(d * d) + (int32_t)f[v[m]];
        }
    }
    free(near); free(v); free(z); free(f);
    return 0;
}

/* sum over pixels of lut[pred] * table[d2]: the weighted F-measure's decayed background term */
static int decay_sum_impl(const uint8_t *pred, const int32_t *d2, const double *lut, const double *table,
                          Py_ssize_t size, Py_ssize_t table_size, double *result)
{
    double total = 0.0;
    for (Py_ssize_t i = 0; i < size; i++) {
        const int32_t k = d2[i];
        if (k < 0 || k >= table_size) return -1;
        total += lut[pred[i]] * table[k];
    }
    *result = total;
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* batched rotation + normalisation                                                             */

static inline int fast_floor(float x)
{
    int i = (int)x;
    return i - (x < (float)i);
}

/* Sampling point of output pixel (x, y): the rotation about the centre in pixel units, as
 * grid_sample(align_corners=False) unnormalises the grid of _rotation_grid. */
typedef struct {
    float cs, sn, hx, hy;
} rotation;

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1

/* The batch written here (17 MB for 12 x 3 x 300 x 300) is read by someone else later and does not
 * stay in the caches: aligned blocks go out with streaming stores, which skip reading each line
 * before writing it and leave the caches to the data loading; ``rotate_normalize`` fences them. */
__attribute__((target("avx2,fma"), always_inline)) static inline void store8(float *dst, __m256 v)
{
    if (((uintptr_t)dst & 31) == 0)
        _mm256_stream_ps(dst, v);
    else
        _mm256_storeu_ps(dst, v);
}

/* Eight output pixels of one row, planar uint8 in. For angles within about +-16 degrees the eight
 * sampling points of a block read at most four consecutive source rows and fifteen consecutive
 * columns, so each row is one 16-byte load and the bilinear neighbours are byte shuffles, no
 * gathers. ``border`` (a constant: two versions are compiled) handles blocks reaching outside the
 * map, whose neighbours there read as 0 (shuffle index 0x80, or a row of zeros: grid_sample's
 * zero padding); without it the block must lie inside. Returns 0, leaving the block to the
 * scalar code, when it does not qualify. */
__attribute__((target("avx2,fma"), always_inline)) static inline int block_avx2(
    const uint8_t *img, const uint8_t *mask, float *out_img, float *out_mask, Py_ssize_t p, int x, int y,
    rotation r, int c, int cm, int h, int w, Py_ssize_t plane, const float *scale, const float *shift,
    const int border)
{
    const __m256 lane = _mm256_setr_ps(0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f);
    const float yy = (float)y + 0.5f - r.hy;
    const __m256 xx = _mm256_add_ps(_mm256_set1_ps((float)x + 0.5f - r.hx), lane);
    /* products and sums unfused, in the scalar code's order: the same sampling points */
    const __m256 ix = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(r.cs), xx), _mm256_set1_ps(r.sn * yy + r.hx - 0.5f));
    const __m256 iy = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(-r.sn), xx), _mm256_set1_ps(r.cs * yy + r.hy - 0.5f));
    const __m256 fx = _mm256_floor_ps(ix), fy = _mm256_floor_ps(iy);
    const __m256i x0 = _mm256_cvttps_epi32(fx), y0 = _mm256_cvttps_epi32(fy);
    /* x0 and y0 are monotone along the block (cos > 0): its ends bound it */
    const int x_first = _mm256_cvtsi256_si32(x0), x_last = _mm256_extract_epi32(x0, 7);
    const int y_a = _mm256_cvtsi256_si32(y0), y_b = _mm256_extract_epi32(y0, 7);
    const int ylo = y_a < y_b ? y_a : y_b, yhi = y_a < y_b ? y_b : y_a;
    if (yhi - ylo > 2 || x_last - x_first > 13 || x_last < x_first) return 0;
    if (!border && (x_first < 0 || x_last > w - 2 || ylo < 0 || yhi > h - 2)) return 0;
    if (border && (x_last < -1 || x_first > w - 1 || yhi < -1 || ylo > h - 1)) {
        /* every neighbour outside (the corners a rotation brings in): zeros, normalised */
        for (int ch = 0; ch < c; ch++) store8(out_img + ch * plane + p, _mm256_set1_ps(shift[ch]));
        for (int ch = 0; ch < cm; ch++) store8(out_mask + ch * plane + p, _mm256_setzero_ps());
        return 1;
    }
    /* 16 bytes from ``start`` hold every neighbour inside the map */
    const int start = x_first < 0 ? 0 : x_first > w - 16 ? w - 16 : x_first;
    const __m256i zero = _mm256_setzero_si256();
    const __m256i d = _mm256_sub_epi32(x0, _mm256_set1_epi32(start));
    __m256i pair; /* per lane the bytes (left, 0x80, right, 0x80): both neighbours by one shuffle */
    if (border) {
        const __m256i wv = _mm256_set1_epi32(w), minus1 = _mm256_set1_epi32(-1);
        const __m256i outside = _mm256_set1_epi32(0x80); /* a shuffle index that reads 0 */
        const __m256i x1 = _mm256_add_epi32(x0, _mm256_set1_epi32(1));
        const __m256i left = _mm256_blendv_epi8(
            outside, d, _mm256_and_si256(_mm256_cmpgt_epi32(x0, minus1), _mm256_cmpgt_epi32(wv, x0)));
        const __m256i right = _mm256_blendv_epi8(outside, _mm256_add_epi32(d, _mm256_set1_epi32(1)),
                                                 _mm256_and_si256(_mm256_cmpgt_epi32(x1, minus1), _mm256_cmpgt_epi32(wv, x1)));
        pair = _mm256_or_si256(_mm256_or_si256(left, _mm256_slli_epi32(right, 16)), _mm256_set1_epi32((int)0x80008000));
    } else {
        pair = _mm256_add_epi32(_mm256_add_epi32(d, _mm256_slli_epi32(d, 16)), _mm256_set1_epi32((int)0x80018000));
    }
    const __m256i off = _mm256_sub_epi32(y0, _mm256_set1_epi32(ylo)); /* 0, 1 or 2 */
    const __m256i ge1 = _mm256_cmpgt_epi32(off, zero);
    const __m256i ge2 = _mm256_cmpgt_epi32(off, _mm256_set1_epi32(1));
    /* always four source rows from ylo, so no branch depends on the block (the spare ones are
       never selected): clamped into the map, and zeroed where they lie outside it */
    Py_ssize_t row_at[4];
    __m256i row_in[4];
    for (int j = 0; j < 4; j++) {
        const int row = ylo + j;
        row_at[j] = (Py_ssize_t)(row < 0 ? 0 : row >= h ? h - 1 : row) * w;
        row_in[j] = _mm256_set1_epi32(border && (row < 0 || row >= h) ? 0 : -1);
    }

    /* horizontal weights in 1/16384 (|error| < 255 / 32768 on the 0..255 scale), applied by one
       multiply-add per row; the vertical blend in float */
    const __m256 e = _mm256_sub_ps(ix, fx), s = _mm256_sub_ps(iy, fy);
    const __m256i we = _mm256_cvtps_epi32(_mm256_mul_ps(e, _mm256_set1_ps(16384.0f)));
    const __m256i wpair = _mm256_or_si256(_mm256_sub_epi32(_mm256_set1_epi32(16384), we), _mm256_slli_epi32(we, 16));
    const __m256 is = _mm256_mul_ps(_mm256_sub_ps(_mm256_set1_ps(1.0f), s), _mm256_set1_ps(1.0f / 16384.0f));
    const __m256 ss = _mm256_mul_ps(s, _mm256_set1_ps(1.0f / 16384.0f));
    for (int ch = 0; ch < c; ch++) {
        const uint8_t *src = img + ch * plane + start;
        __m256i both[4];
        /* the row after these, which the next output rows will read */
        _mm_prefetch((const char *)(src + row_at[3] + w + 32), _MM_HINT_T0);
        for (int j = 0; j < 4; j++) {
            both[j] = _mm256_shuffle_epi8(_mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(src + row_at[j]))),
                                          pair);
            if (border) both[j] = _mm256_and_si256(both[j], row_in[j]);
        }
        /* row off for the top neighbours, off + 1 for the bottom ones */
        const __m256i top = _mm256_blendv_epi8(_mm256_blendv_epi8(both[0], both[1], ge1), both[2], ge2);
        const __m256i bottom = _mm256_blendv_epi8(_mm256_blendv_epi8(both[1], both[2], ge1), both[3], ge2);
        const __m256 t = _mm256_cvtepi32_ps(_mm256_madd_epi16(top, wpair));
        const __m256 b = _mm256_cvtepi32_ps(_mm256_madd_epi16(bottom, wpair));
        __m256 val = _mm256_add_ps(_mm256_mul_ps(t, is), _mm256_mul_ps(b, ss));
        val = _mm256_add_ps(_mm256_mul_ps(val, _mm256_set1_ps(scale[ch])), _mm256_set1_ps(shift[ch]));
        store8(out_img + ch * plane + p, val);
    }
    if (cm > 0) {
        /* nearest, ties to even: one of x0, x0 + 1 and of y0, y0 + 1, so inside the same window */
        const __m256i mx = _mm256_cvtps_epi32(_mm256_round_ps(ix, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        const __m256i my = _mm256_cvtps_epi32(_mm256_round_ps(iy, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        __m256i pick = _mm256_sub_epi32(mx, _mm256_set1_epi32(start));
        if (border) {
            const __m256i wv = _mm256_set1_epi32(w), minus1 = _mm256_set1_epi32(-1);
            pick = _mm256_blendv_epi8(_mm256_set1_epi32(0x80), pick,
                                      _mm256_and_si256(_mm256_cmpgt_epi32(mx, minus1), _mm256_cmpgt_epi32(wv, mx)));
        }
        pick = _mm256_or_si256(pick, _mm256_set1_epi32((int)0x80808000));
        const __m256i moff = _mm256_sub_epi32(my, _mm256_set1_epi32(ylo)); /* 0 .. 3 */
        for (int ch = 0; ch < cm; ch++) {
            const uint8_t *src = mask + ch * plane + start;
            __m256i v = zero;
            _mm_prefetch((const char *)(src + row_at[3] + w + 32), _MM_HINT_T0);
            for (int j = 0; j < 4; j++) {
                __m256i got = _mm256_shuffle_epi8(
                    _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)(src + row_at[j]))), pick);
                if (border) got = _mm256_and_si256(got, row_in[j]); /* zeros outside */
                v = j == 0 ? got : _mm256_blendv_epi8(v, got, _mm256_cmpgt_epi32(moff, _mm256_set1_epi32(j - 1)));
            }
            const __m256 m = _mm256_div_ps(_mm256_cvtepi32_ps(v), _mm256_set1_ps(255.0f));
            store8(out_mask + ch * plane + p, m);
        }
    }
    return 1;
}

__attribute__((target("avx2,fma"))) static int block_inside(
    const uint8_t *img, const uint8_t *mask, float *out_img, float *out_mask, Py_ssize_t p, int x, int y,
    rotation r, int c, int cm, int h, int w, Py_ssize_t plane, const float *scale, const float *shift)
{
    return block_avx2(img, mask, out_img, out_mask, p, x, y, r, c, cm, h, w, plane, scale, shift, 0);
}

__attribute__((target("avx2,fma"))) static int block_border(
    const uint8_t *img, const uint8_t *mask, float *out_img, float *out_mask, Py_ssize_t p, int x, int y,
    rotation r, int c, int cm, int h, int w, Py_ssize_t plane, const float *scale, const float *shift)
{
    return block_avx2(img, mask, out_img, out_mask, p, x, y, r, c, cm, h, w, plane, scale, shift, 1);
}
#endif

/* round half to even, like grid_sample's nearbyint (default rounding mode) */
static inline int round_even(float x) { return (int)lrintf(x); }

/* One output pixel, planar in and out: image bilinear, masks nearest. */
static inline void pixel_scalar(const uint8_t *restrict img, const uint8_t *restrict mask, float *restrict out_img,
                                float *restrict out_mask, Py_ssize_t p, int x, int y, rotation r, Py_ssize_t c,
                                Py_ssize_t cm, Py_ssize_t h, Py_ssize_t w, Py_ssize_t plane,
                                const float *restrict scale, const float *restrict shift)
{
    const float yy = (float)y + 0.5f - r.hy;
    const float xx = (float)x + 0.5f - r.hx;
    const float ix = r.cs * xx + (r.sn * yy + r.hx - 0.5f);
    const float iy = -r.sn * xx + (r.cs * yy + r.hy - 0.5f);
    const int x0 = fast_floor(ix), y0 = fast_floor(iy);
    const float e = ix - (float)x0, s = iy - (float)y0; /* east / south weights */
    const float nw = (1.0f - e) * (1.0f - s), ne = e * (1.0f - s);
    const float sw = (1.0f - e) * s, se = e * s;
    const int in_x0 = x0 >= 0 && x0 < w, in_x1 = x0 + 1 >= 0 && x0 + 1 < w;
    const int in_y0 = y0 >= 0 && y0 < h, in_y1 = y0 + 1 >= 0 && y0 + 1 < h;
    const Py_ssize_t q = (Py_ssize_t)y0 * w + x0;
    for (Py_ssize_t ch = 0; ch < c; ch++) {
        const uint8_t *src = img + ch * plane;
        /* grid_sample's sum: nw, + ne, + sw, + se (a neighbour outside adds 0) */
        float val = (in_y0 && in_x0 ? (float)src[q] : 0.0f) * nw;
        val = val + (in_y0 && in_x1 ? (float)src[q + 1] : 0.0f) * ne;
        val = val + (in_y1 && in_x0 ? (float)src[q + w] : 0.0f) * sw;
        val = val + (in_y1 && in_x1 ? (float)src[q + w + 1] : 0.0f) * se;
        out_img[ch * plane + p] = val * scale[ch] + shift[ch];
    }
    const int mx = round_even(ix), my = round_even(iy);
    const int inside = mx >= 0 && my >= 0 && mx < w && my < h;
    for (Py_ssize_t ch = 0; ch < cm; ch++)
        out_mask[ch * plane + p] = inside ? (float)mask[ch * plane + (Py_ssize_t)my * w + mx] / 255.0f : 0.0f;
}

static void rotate_one(const uint8_t *img, const uint8_t *mask, double angle, const float *scale,
                       const float *shift, float *out_img, float *out_mask, Py_ssize_t c, Py_ssize_t cm,
                       Py_ssize_t h, Py_ssize_t w, int use_avx2)
{
    const double t = -angle * 3.14159265358979323846 / 180.0;
    rotation r = {(float)cos(t), (float)sin(t), (float)w * 0.5f, (float)h * 0.5f};
    const Py_ssize_t plane = h * w;
    (void)use_avx2;
    for (Py_ssize_t y = 0; y < h; y++) {
        Py_ssize_t x = 0;
#ifdef HAVE_AVX2_PATH
        /* the vector code takes the row in blocks of eight (those inside the map with fewer
           checks), the last block overlapping its neighbour when w % 8 != 0 (it writes the same
           values again); the scalar code takes over where a block does not fit its window */
        if (use_avx2 && w >= 16) {
            /* after a first block at 0, blocks start where the output row is 32-byte aligned */
            const Py_ssize_t shift0 = (8 - (Py_ssize_t)(((uintptr_t)(out_img + y * w) >> 2) & 7)) & 7;
            for (; x < w; x = x == 0 && shift0 ? shift0 : x + 8) {
                const Py_ssize_t bx = x + 8 <= w ? x : w - 8;
                if (!block_inside(img, mask, out_img, out_mask, y * w + bx, (int)bx, (int)y, r, (int)c, (int)cm,
                                  (int)h, (int)w, plane, scale, shift) &&
                    !block_border(img, mask, out_img, out_mask, y * w + bx, (int)bx, (int)y, r, (int)c, (int)cm,
                                  (int)h, (int)w, plane, scale, shift))
                    break;
            }
        }
#endif
        for (; x < w; x++)
            pixel_scalar(img, mask, out_img, out_mask, y * w + x, (int)x, (int)y, r, c, cm, h, w, plane, scale,
                         shift);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* crop (and flip) of a channels-last image into planar memory                                 */

#ifdef HAVE_AVX2_PATH
/* 16 RGB pixels (48 bytes) to 16 R, 16 G, 16 B bytes, reversed when ``flip``. */
__attribute__((target("ssse3"))) static inline void rgb16_to_planar(const uint8_t *src, uint8_t *r, uint8_t *g,
                                                                    uint8_t *b, int flip)
{
    const __m128i a = _mm_loadu_si128((const __m128i *)src);
    const __m128i m = _mm_loadu_si128((const __m128i *)(src + 16));
    const __m128i z = _mm_loadu_si128((const __m128i *)(src + 32));
    /* channel k of pixel i sits at byte 3 i + k of the 48: in a, m or z */
#define SEL(x, ...) _mm_shuffle_epi8((x), _mm_setr_epi8(__VA_ARGS__))
    const __m128i rr = _mm_or_si128(_mm_or_si128(SEL(a, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                                 SEL(m, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1)),
                                    SEL(z, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13));
    const __m128i gg = _mm_or_si128(_mm_or_si128(SEL(a, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                                 SEL(m, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15, -1, -1, -1, -1, -1)),
                                    SEL(z, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 2, 5, 8, 11, 14));
    const __m128i bb = _mm_or_si128(_mm_or_si128(SEL(a, 2, 5, 8, 11, 14, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1),
                                                 SEL(m, -1, -1, -1, -1, -1, 1, 4, 7, 10, 13, -1, -1, -1, -1, -1, -1)),
                                    SEL(z, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 3, 6, 9, 12, 15));
#undef SEL
    if (flip) {
        const __m128i rev = _mm_setr_epi8(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
        _mm_storeu_si128((__m128i *)r, _mm_shuffle_epi8(rr, rev));
        _mm_storeu_si128((__m128i *)g, _mm_shuffle_epi8(gg, rev));
        _mm_storeu_si128((__m128i *)b, _mm_shuffle_epi8(bb, rev));
    } else {
        _mm_storeu_si128((__m128i *)r, rr);
        _mm_storeu_si128((__m128i *)g, gg);
        _mm_storeu_si128((__m128i *)b, bb);
    }
}
#endif

/* out (c, size_h, size_w) = src (h, w, c)[y0 : y0 + size_h, x0 : x0 + size_w], columns reversed
 * when ``flip`` (after the crop). */
static void crop_planar_impl(const uint8_t *src, uint8_t *out, Py_ssize_t w, Py_ssize_t c, Py_ssize_t y0,
                             Py_ssize_t x0, Py_ssize_t size_h, Py_ssize_t size_w, int flip, int use_ssse3)
{
    const Py_ssize_t plane = size_h * size_w;
    (void)use_ssse3;
    for (Py_ssize_t r = 0; r < size_h; r++) {
        const uint8_t *row = src + ((y0 + r) * w + x0) * c;
        Py_ssize_t i = 0; /* output column */
#ifdef HAVE_AVX2_PATH
        if (use_ssse3 && c == 3) {
            for (; i + 16 <= size_w; i += 16) {
                /* output columns i .. i + 15 come from source columns i .. i + 15, or from the
                   mirrored ones, size_w - 16 - i .. size_w - 1 - i, reversed */
                const Py_ssize_t from = flip ? size_w - 16 - i : i;
                uint8_t *o = out + r * size_w + i;
                rgb16_to_planar(row + from * 3, o, o + plane, o + 2 * plane, flip);
            }
        }
#endif
        for (; i < size_w; i++) {
            const Py_ssize_t from = flip ? size_w - 1 - i : i;
            for (Py_ssize_t ch = 0; ch < c; ch++) out[ch * plane + r * size_w + i] = row[from * c + ch];
        }
    }
}

/* ------------------------------------------------------------------------------------------ */
/* Python bindings                                                                             */

static int check_size(Py_buffer *b, Py_ssize_t expected, const char *name)
{
    if (b->len != expected) {
        PyErr_Format(PyExc_ValueError, "%s holds %zd bytes, expected %zd", name, b->len, expected);
        return -1;
    }
    return 0;
}

static PyObject *py_edt_sq(PyObject *self, PyObject *args)
{
    Py_buffer fg, out;
    Py_ssize_t h, w;
    if (!PyArg_ParseTuple(args, "y*w*nn", &fg, &out, &h, &w)) return NULL;
    PyObject *result = NULL;
    int rc = 0;
    if (h < 1 || w < 1) {
        PyErr_SetString(PyExc_ValueError, "h and w must be positive");
        goto done;
    }
    if (check_size(&fg, h * w, "fg") || check_size(&out, h * w * (Py_ssize_t)sizeof(int32_t), "out"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    rc = edt_sq_impl((const uint8_t *)fg.buf, (int32_t *)out.buf, h, w);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_NoMemory();
        goto done;
    }
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&fg);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *py_rotate_normalize(PyObject *self, PyObject *args)
{
    Py_buffer img, mask, ang, scale, shift, out_img, out_mask;
    Py_ssize_t n, c, cm, h, w;
    if (!PyArg_ParseTuple(args, "y*y*y*y*y*w*w*nnnnn", &img, &mask, &ang, &scale, &shift, &out_img,
                          &out_mask, &n, &c, &cm, &h, &w))
        return NULL;
    PyObject *result = NULL;
    if (n < 0 || c < 1 || cm < 0 || h < 1 || w < 1) {
        PyErr_SetString(PyExc_ValueError, "bad shape");
        goto done;
    }
    const Py_ssize_t plane = h * w;
    if (check_size(&img, n * c * plane, "images") || check_size(&mask, n * cm * plane, "masks") ||
        check_size(&ang, n * (Py_ssize_t)sizeof(double), "angles") ||
        check_size(&scale, c * (Py_ssize_t)sizeof(float), "scale") ||
        check_size(&shift, c * (Py_ssize_t)sizeof(float), "shift") ||
        check_size(&out_img, n * c * plane * (Py_ssize_t)sizeof(float), "out_images") ||
        check_size(&out_mask, n * cm * plane * (Py_ssize_t)sizeof(float), "out_masks"))
        goto done;
    int use_avx2 = 0;
#ifdef HAVE_AVX2_PATH
    use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++)
        rotate_one((const uint8_t *)img.buf + i * c * plane, (const uint8_t *)mask.buf + i * cm * plane,
                   ((const double *)ang.buf)[i], (const float *)scale.buf, (const float *)shift.buf,
                   (float *)out_img.buf + i * c * plane, (float *)out_mask.buf + i * cm * plane, c, cm, h, w,
                   use_avx2);
#ifdef HAVE_AVX2_PATH
    if (use_avx2) _mm_sfence(); /* the streaming stores are complete before Python reads the output */
#endif
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&img);
    PyBuffer_Release(&mask);
    PyBuffer_Release(&ang);
    PyBuffer_Release(&scale);
    PyBuffer_Release(&shift);
    PyBuffer_Release(&out_img);
    PyBuffer_Release(&out_mask);
    return result;
}

static PyObject *py_crop_planar(PyObject *self, PyObject *args)
{
    Py_buffer src, out;
    Py_ssize_t h, w, c, y0, x0, size_h, size_w;
    int flip;
    if (!PyArg_ParseTuple(args, "y*w*nnnnnnnp", &src, &out, &h, &w, &c, &y0, &x0, &size_h, &size_w, &flip))
        return NULL;
    PyObject *result = NULL;
    if (h < 1 || w < 1 || c < 1 || y0 < 0 || x0 < 0 || size_h < 1 || size_w < 1 || y0 + size_h > h ||
        x0 + size_w > w) {
        PyErr_SetString(PyExc_ValueError, "crop window outside the image");
        goto done;
    }
    if (check_size(&src, h * w * c, "src") || check_size(&out, c * size_h * size_w, "out")) goto done;
    int use_ssse3 = 0;
#ifdef HAVE_AVX2_PATH
    use_ssse3 = __builtin_cpu_supports("ssse3");
#endif
    Py_BEGIN_ALLOW_THREADS
    crop_planar_impl((const uint8_t *)src.buf, (uint8_t *)out.buf, w, c, y0, x0, size_h, size_w, flip, use_ssse3);
    Py_END_ALLOW_THREADS
    result = Py_NewRef(Py_None);
done:
    PyBuffer_Release(&src);
    PyBuffer_Release(&out);
    return result;
}

static PyObject *py_decay_sum(PyObject *self, PyObject *args)
{
    Py_buffer pred, d2, lut, table;
    if (!PyArg_ParseTuple(args, "y*y*y*y*", &pred, &d2, &lut, &table)) return NULL;
    PyObject *result = NULL;
    double total = 0.0;
    int rc = 0;
    if (check_size(&d2, pred.len * (Py_ssize_t)sizeof(int32_t), "d2") ||
        check_size(&lut, 256 * (Py_ssize_t)sizeof(double), "lut"))
        goto done;
    Py_BEGIN_ALLOW_THREADS
    rc = decay_sum_impl((const uint8_t *)pred.buf, (const int32_t *)d2.buf, (const double *)lut.buf,
                        (const double *)table.buf, pred.len, table.len / (Py_ssize_t)sizeof(double), &total);
    Py_END_ALLOW_THREADS
    if (rc) {
        PyErr_SetString(PyExc_ValueError, "a squared distance is outside the table");
        goto done;
    }
    result = PyFloat_FromDouble(total);
done:
    PyBuffer_Release(&pred);
    PyBuffer_Release(&d2);
    PyBuffer_Release(&lut);
    PyBuffer_Release(&table);
    return result;
}

static PyMethodDef methods[] = {
    {"edt_sq", py_edt_sq, METH_VARARGS,
     "edt_sq(fg, out, h, w): exact squared distance to the nearest nonzero pixel (uint8 in, int32 out)."},
    {"rotate_normalize", py_rotate_normalize, METH_VARARGS,
     "rotate_normalize(images, masks, angles, scale, shift, out_images, out_masks, n, c, cm, h, w): "
     "bilinear image / nearest mask rotation of uint8 samples with the normalisation fused."},
    {"decay_sum", py_decay_sum, METH_VARARGS,
     "decay_sum(pred, d2, lut, table): sum of lut[pred] * table[d2] (uint8, int32, 256 and any float64)."},
    {"crop_planar", py_crop_planar, METH_VARARGS,
     "crop_planar(src, out, h, w, c, y0, x0, size_h, size_w, flip): channels-last uint8 crop (maybe "
     "mirrored) written planar."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "_native",
    .m_doc = "Optional CPU kernels of ignite_r3net.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
