/* model_manifest.c: a model's manifest (docs/c-abi.md section 2) written from its tables, byte
 * for byte as the compiler's dlvm.codegen.glue.manifest_json writes it (Python's json.dumps:
 * ", " and ": " between items, every character outside printable ASCII escaped). Written once,
 * into the glue's buffer, which every later call returns. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "internal.h"
#include "json.h"
#include "model.h"

/* The IR's name of each dtype. */
static const char *const ir_names[] = {
    [DLRT_BOOL] = "bool", [DLRT_I8] = "i8",   [DLRT_I16] = "i16", [DLRT_I32] = "i32",
    [DLRT_I64] = "i64",   [DLRT_F16] = "f16", [DLRT_F32] = "f32", [DLRT_F64] = "f64",
    [DLRT_BF16] = "bf16",
};

/* The code point of the UTF-8 sequence at *p (advanced past it); U+FFFD for a malformed one,
   which the compiler never writes. */
static uint32_t next_code_point(const unsigned char **p) {
    const unsigned char *s = *p;
    uint32_t c = s[0];
    int more = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
    *p += 1;
    if (c < 0x80) {
        return c;
    }
    for (int i = 1; i <= more; i++) {
        if ((s[i] & 0xC0) != 0x80) { /* the terminating NUL among them: never read past it */
            return 0xFFFD;
        }
    }
    if (more == 0 || !dlrt_valid_utf8((const char *)s, (size_t)more + 1)) {
        return 0xFFFD;
    }
    c &= 0x3Fu >> more;
    for (int i = 1; i <= more; i++) {
        c = (c << 6) | (s[i] & 0x3Fu);
    }
    *p += more;
    return c;
}

/* The characters of `text` inside a JSON string, as json.dumps writes them (ensure_ascii). */
static void characters(json_writer *w, const char *text) {
    char escaped[16];
    for (const unsigned char *p = (const unsigned char *)text; *p != '\0';) {
        uint32_t c = next_code_point(&p);
        const char *short_form = c == '"'    ? "\\\""
                                 : c == '\\' ? "\\\\"
                                 : c == '\n' ? "\\n"
                                 : c == '\r' ? "\\r"
                                 : c == '\t' ? "\\t"
                                 : c == '\b' ? "\\b"
                                 : c == '\f' ? "\\f"
                                             : NULL;
        if (short_form != NULL) {
            json_raw(w, short_form);
        } else if (c >= 0x20 && c < 0x7F) {
            escaped[0] = (char)c;
            escaped[1] = '\0';
            json_raw(w, escaped);
        } else if (c < 0x10000) {
            snprintf(escaped, sizeof escaped, "\\u%04x", (unsigned)c);
            json_raw(w, escaped);
        } else { /* a surrogate pair */
            c -= 0x10000;
            snprintf(escaped, sizeof escaped, "\\u%04x\\u%04x", 0xD800u + (unsigned)(c >> 10),
                     0xDC00u + (unsigned)(c & 0x3FF));
            json_raw(w, escaped);
        }
    }
}

/* `text` as a JSON string. */
static void quoted(json_writer *w, const char *text) {
    json_raw(w, "\"");
    characters(w, text);
    json_raw(w, "\"");
}

/* `"key": "value"` with `before` (", " or "") in front. */
static void field(json_writer *w, const char *before, const char *key, const char *value) {
    json_raw(w, before);
    quoted(w, key);
    json_raw(w, ": ");
    quoted(w, value);
}

/* "dtype" and "shape" of a tensor. */
static void dtype_and_shape(json_writer *w, const dlrt_tensor *t) {
    unsigned dtype = (unsigned)t->dtype;
    field(w, ", ", "dtype", dtype < sizeof ir_names / sizeof ir_names[0] ? ir_names[dtype] : "?");
    json_raw(w, ", \"shape\": [");
    for (int32_t i = 0; i < t->rank; i++) {
        json_raw(w, i ? ", " : "");
        json_int64(w, t->shape[i]);
    }
    json_raw(w, "]");
}

/* A list of tensors: [{"name": …, "dtype": …, "shape": […]}, …]; those from index `buffers`
   on also say "kind": "buffer". */
static void listed(json_writer *w, const dlrt_tensor *ts, int32_t n, int32_t buffers) {
    json_raw(w, "[");
    for (int32_t i = 0; i < n; i++) {
        field(w, i ? ", {" : "{", "name", ts[i].name);
        dtype_and_shape(w, &ts[i]);
        if (i >= buffers) {
            field(w, ", ", "kind", "buffer");
        }
        json_raw(w, "}");
    }
    json_raw(w, "]");
}

static void tensors(json_writer *w, const dlrt_tensor *ts, int32_t n) {
    listed(w, ts, n, n);
}

static void entry(json_writer *w, const dlrt_model_spec *spec, const dlrt_entry *e) {
    field(w, "{", "name", e->name);
    field(w, ", ", "kind", e->kind);
    field(w, ", ", "symbol", e->symbol);
    json_raw(w, ", \"inputs\": ");
    tensors(w, e->args, e->inputs);
    json_raw(w, ", \"outputs\": ");
    tensors(w, e->args + e->inputs, e->outputs);
    if (spec->cuda != NULL) {
        /* Where the entry runs on "cuda:N". */
        json_raw(w, ", \"cuda\": ");
        if (e->plan != NULL) {
            quoted(w, "gpu");
        } else {
            json_raw(w, "\"cpu: ");
            characters(w, e->cpu != NULL ? e->cpu : "");
            json_raw(w, "\"");
        }
    }
    json_raw(w, "}");
}

/* The whole manifest into w. */
static void manifest(json_writer *w, const dlrt_model_spec *spec) {
    json_raw(w, "{\"abi\": 1");
    field(w, ", ", "name", spec->name);
    field(w, ", ", "compiler", spec->compiler);
    if (spec->cuda == NULL) {
        json_raw(w, ", \"devices\": [\"cpu\"]");
    } else {
        json_raw(w, ", \"devices\": [\"cpu\", \"cuda\"]");
        field(w, ", ", "gpu", spec->cuda->gpu);
    }
    json_raw(w, ", \"params\": ");
    listed(w, spec->tensors, spec->params, spec->params - spec->buffers);
    json_raw(w, ", \"states\": [");
    for (int32_t i = 0; i < spec->states - spec->derived; i++) {
        const dlrt_tensor *t = &spec->tensors[spec->params + i];
        field(w, i ? ", {" : "{", "name", t->name);
        field(w, ", ", "param", spec->tensors[spec->state_params[i]].name);
        dtype_and_shape(w, t);
        json_raw(w, "}");
    }
    json_raw(w, "], \"entries\": [");
    for (int32_t k = 0; k < spec->entry_count; k++) {
        json_raw(w, k ? ", " : "");
        entry(w, spec, &spec->entries[k]);
    }
    json_raw(w, "]}");
}

/* One lock for every model of the library: a manifest is written once, and rarely read. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

const char *dlrt_model_manifest(const dlrt_model_spec *spec, char *buffer, size_t size) {
    pthread_mutex_lock(&lock);
    /* Tables the runtime cannot read leave the buffer empty (and say why in the last error). */
    if (size > 0 && buffer[0] == '\0' && dlrt_model_check(spec, "dlrt_model_manifest") == DLRT_OK) {
        json_writer w = {0};
        manifest(&w, spec);
        /* The glue sized the buffer for this text; anything else leaves it empty. */
        if (!w.failed && w.len + 1 == size) {
            memcpy(buffer, w.data, size);
        }
        json_writer_free(&w);
    }
    pthread_mutex_unlock(&lock);
    return size > 0 ? buffer : "";
}
