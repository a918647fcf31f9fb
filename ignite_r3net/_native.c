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
 *       For each of n samples: rotate the uint8 image (c, h, w) counter-clockwise by angles[i]
 *       degrees about its centre, bilinear with zeros outside, then out = value * scale[ch] +
 *       shift[ch] (float32); rotate the uint8 mask (cm, h, w) with nearest-neighbour sampling
 *       (ties to even), out = value / 255. The sampling points are those of
 *       torch.nn.functional.grid_sample(align_corners=False) on the grid of
 *       ignite_r3net.data.transforms._rotation_grid, so this equals the torch path up to float
 *       rounding; it reads uint8 and writes the normalised float once.
 *
 * Both release the GIL while they compute.
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

/* ------------------------------------------------------------------------------------------ */
/* batched rotation + normalisation                                                             */

static inline int fast_floor(float x)
{
    int i = (int)x;
    return i - (x < (float)i);
}

/* round half to even, like grid_sample's nearbyint (default rounding mode) */
static inline int round_even(float x)
{
    return (int)lrintf(x);
}

#if (defined(__GNUC__) || defined(__clang__)) && (defined(__x86_64__) || defined(__i386__))
#include <immintrin.h>
#define HAVE_AVX2_PATH 1

/* Eight output pixels of one row at a time with AVX2 gathers. Handles the blocks whose bilinear
 * neighbourhoods lie inside the map with a row to spare below (so every 4-byte gather stays in
 * the plane); returns 1 when it wrote the block, 0 to leave it to the scalar code. */
__attribute__((target("avx2,fma"))) static int block_avx2(
    const uint8_t *img, const uint8_t *mask, float *out_img, float *out_mask, Py_ssize_t p, float x,
    float cs, float sn, float bx, float by, float hx, int c, int cm, int h, int w, Py_ssize_t plane,
    const float *scale, const float *shift)
{
    const __m256 lane = _mm256_setr_ps(0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f);
    const __m256 xx = _mm256_add_ps(_mm256_set1_ps(x + 0.5f - hx), lane);
    /* the scalar code's products and sums, unfused, so both paths give the same floats */
    const __m256 ix = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(cs), xx), _mm256_set1_ps(bx));
    const __m256 iy = _mm256_add_ps(_mm256_mul_ps(_mm256_set1_ps(-sn), xx), _mm256_set1_ps(by));
    const __m256 fx = _mm256_floor_ps(ix), fy = _mm256_floor_ps(iy);
    const __m256i x0 = _mm256_cvttps_epi32(fx), y0 = _mm256_cvttps_epi32(fy);
    const __m256i bad = _mm256_or_si256(
        _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), x0), _mm256_cmpgt_epi32(x0, _mm256_set1_epi32(w - 2))),
        _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_setzero_si256(), y0), _mm256_cmpgt_epi32(y0, _mm256_set1_epi32(h - 3))));
    if (!_mm256_testz_si256(bad, bad)) return 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    const __m256 e = _mm256_sub_ps(ix, fx), s = _mm256_sub_ps(iy, fy);
    const __m256 ie = _mm256_sub_ps(one, e), is = _mm256_sub_ps(one, s);
    const __m256 nw = _mm256_mul_ps(ie, is), ne = _mm256_mul_ps(e, is);
    const __m256 sw = _mm256_mul_ps(ie, s), se = _mm256_mul_ps(e, s);
    const __m256i idx = _mm256_add_epi32(_mm256_mullo_epi32(y0, _mm256_set1_epi32(w)), x0);
    const __m256i idx_b = _mm256_add_epi32(idx, _mm256_set1_epi32(w));
    const __m256i byte = _mm256_set1_epi32(0xff);
    for (int ch = 0; ch < c; ch++) {
        const int *base = (const int *)(img + ch * plane);
        const __m256i top = _mm256_i32gather_epi32(base, idx, 1);
        const __m256i bot = _mm256_i32gather_epi32(base, idx_b, 1);
        const __m256 t0 = _mm256_cvtepi32_ps(_mm256_and_si256(top, byte));
        const __m256 t1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(top, 8), byte));
        const __m256 b0 = _mm256_cvtepi32_ps(_mm256_and_si256(bot, byte));
        const __m256 b1 = _mm256_cvtepi32_ps(_mm256_and_si256(_mm256_srli_epi32(bot, 8), byte));
        __m256 val = _mm256_add_ps(_mm256_mul_ps(t0, nw), _mm256_mul_ps(t1, ne));
        val = _mm256_add_ps(val, _mm256_mul_ps(b0, sw));
        val = _mm256_add_ps(val, _mm256_mul_ps(b1, se));
        val = _mm256_add_ps(_mm256_mul_ps(val, _mm256_set1_ps(scale[ch])), _mm256_set1_ps(shift[ch]));
        _mm256_storeu_ps(out_img + ch * plane + p, val);
    }
    /* nearest, ties to even; inside because the bilinear neighbourhood is */
    const __m256i mx = _mm256_cvtps_epi32(_mm256_round_ps(ix, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i my = _mm256_cvtps_epi32(_mm256_round_ps(iy, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    const __m256i midx = _mm256_add_epi32(_mm256_mullo_epi32(my, _mm256_set1_epi32(w)), mx);
    for (int ch = 0; ch < cm; ch++) {
        const __m256i v = _mm256_i32gather_epi32((const int *)(mask + ch * plane), midx, 1);
        const __m256 m = _mm256_div_ps(_mm256_cvtepi32_ps(_mm256_and_si256(v, byte)), _mm256_set1_ps(255.0f));
        _mm256_storeu_ps(out_mask + ch * plane + p, m);
    }
    return 1;
}
#endif

static inline __attribute__((always_inline)) void rotate_one(const uint8_t *restrict img, const uint8_t *restrict mask, double angle,
                       const float *restrict scale, const float *restrict shift, float *restrict out_img,
                       float *restrict out_mask, Py_ssize_t c, Py_ssize_t cm, Py_ssize_t h, Py_ssize_t w,
                       const float *restrict unit, int use_avx2)
{
    const double t = -angle * 3.14159265358979323846 / 180.0;
    const float cs = (float)cos(t), sn = (float)sin(t);
    const float hx = (float)w * 0.5f, hy = (float)h * 0.5f;
    const Py_ssize_t plane = h * w;
    for (Py_ssize_t y = 0; y < h; y++) {
        const float yy = (float)y + 0.5f - hy;
        const float bx = sn * yy + hx - 0.5f, by = cs * yy + hy - 0.5f;
        Py_ssize_t x = 0;
#ifdef HAVE_AVX2_PATH
        if (use_avx2 && w >= 3) {
            for (; x + 8 <= w; x += 8) {
                if (!block_avx2(img, mask, out_img, out_mask, y * w + x, (float)x, cs, sn, bx, by, hx, (int)c,
                                (int)cm, (int)h, (int)w, plane, scale, shift))
                    break;
            }
            /* a block that left the map: the scalar code takes over the row from there, and
               the vector code resumes after it */
        }
#endif
        for (; x < w; x++) {
#ifdef HAVE_AVX2_PATH
            if (use_avx2 && w >= 3 && (x & 7) == 0 && x + 8 <= w &&
                block_avx2(img, mask, out_img, out_mask, y * w + x, (float)x, cs, sn, bx, by, hx, (int)c,
                           (int)cm, (int)h, (int)w, plane, scale, shift)) {
                x += 7;
                continue;
            }
#endif
            const float xx = (float)x + 0.5f - hx;
            const float ix = cs * xx + bx;
            const float iy = -sn * xx + by;
            const Py_ssize_t p = y * w + x;

            const int x0 = fast_floor(ix), y0 = fast_floor(iy);
            const float e = ix - (float)x0, s = iy - (float)y0; /* east / south weights */
            const float nw = (1.0f - e) * (1.0f - s), ne = e * (1.0f - s);
            const float sw = (1.0f - e) * s, se = e * s;
            if (x0 >= 0 && y0 >= 0 && x0 + 1 < w && y0 + 1 < h) {
                const uint8_t *src = img + (Py_ssize_t)y0 * w + x0;
                float *dst = out_img + p;
                for (Py_ssize_t ch = 0; ch < c; ch++, src += plane, dst += plane) {
                    const float val = unit[src[0]] * nw + unit[src[1]] * ne + unit[src[w]] * sw +
                                      unit[src[w + 1]] * se;
                    *dst = val * scale[ch] + shift[ch];
                }
            } else {
                const int in_x0 = x0 >= 0 && x0 < w, in_x1 = x0 + 1 >= 0 && x0 + 1 < w;
                const int in_y0 = y0 >= 0 && y0 < h, in_y1 = y0 + 1 >= 0 && y0 + 1 < h;
                for (Py_ssize_t ch = 0; ch < c; ch++) {
                    const uint8_t *src = img + ch * plane;
                    float val = 0.0f;
                    if (in_y0 && in_x0) val += unit[src[(Py_ssize_t)y0 * w + x0]] * nw;
                    if (in_y0 && in_x1) val += unit[src[(Py_ssize_t)y0 * w + x0 + 1]] * ne;
                    if (in_y1 && in_x0) val += unit[src[(Py_ssize_t)(y0 + 1) * w + x0]] * sw;
                    if (in_y1 && in_x1) val += unit[src[(Py_ssize_t)(y0 + 1) * w + x0 + 1]] * se;
                    out_img[ch * plane + p] = val * scale[ch] + shift[ch];
                }
            }

            const int mx = round_even(ix), my = round_even(iy);
            if (mx >= 0 && my >= 0 && mx < w && my < h) {
                const uint8_t *src = mask + (Py_ssize_t)my * w + mx;
                for (Py_ssize_t ch = 0; ch < cm; ch++) out_mask[ch * plane + p] = unit[src[ch * plane]] / 255.0f;
            } else {
                for (Py_ssize_t ch = 0; ch < cm; ch++) out_mask[ch * plane + p] = 0.0f;
            }
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
    float unit[256]; /* uint8 -> float, a load instead of a conversion */
    for (int v = 0; v < 256; v++) unit[v] = (float)v;
    int use_avx2 = 0;
#ifdef HAVE_AVX2_PATH
    use_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#endif
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        const uint8_t *ii = (const uint8_t *)img.buf + i * c * plane;
        const uint8_t *mi = (const uint8_t *)mask.buf + i * cm * plane;
        const double a = ((const double *)ang.buf)[i];
        float *oi = (float *)out_img.buf + i * c * plane, *om = (float *)out_mask.buf + i * cm * plane;
        if (c == 3 && cm == 1) /* the training case, with the channel loops unrolled */
            rotate_one(ii, mi, a, (const float *)scale.buf, (const float *)shift.buf, oi, om, 3, 1, h, w, unit, use_avx2);
        else
            rotate_one(ii, mi, a, (const float *)scale.buf, (const float *)shift.buf, oi, om, c, cm, h, w, unit, use_avx2);
    }
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

static PyMethodDef methods[] = {
    {"edt_sq", py_edt_sq, METH_VARARGS,
     "edt_sq(fg, out, h, w): exact squared distance to the nearest nonzero pixel (uint8 in, int32 out)."},
    {"rotate_normalize", py_rotate_normalize, METH_VARARGS,
     "rotate_normalize(images, masks, angles, scale, shift, out_images, out_masks, n, c, cm, h, w): "
     "bilinear image / nearest mask rotation of uint8 samples with the normalisation fused."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_native", "Optional CPU kernels of ignite_r3net.",
                                    -1, methods};

PyMODINIT_FUNC PyInit__native(void) { return PyModule_Create(&module); }
