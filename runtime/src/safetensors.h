/* safetensors.h: pieces shared by dlrt_save and dlrt_load (internal): the parsed header, and the
 * checks of the caller's tensor entries. */
#ifndef DLRT_SAFETENSORS_H_
#define DLRT_SAFETENSORS_H_

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dlrt.h"
#include "json.h"

/* One tensor of a file's header, as read: nothing is checked beyond the JSON types. */
typedef struct {
    char *name;
    char *dtype; /* the safetensors name ("F32"), one the reference knows */
    uint64_t *shape;
    size_t rank;
    uint64_t begin; /* data_offsets, relative to the end of the header */
    uint64_t end;
    size_t order; /* position in the header */
} sf_tensor;

/* A parsed header: its tensors sorted by name ("__metadata__" is checked, then dropped). */
typedef struct {
    sf_tensor *tensors;
    size_t count;
} sf_header;

/* The largest header the reference reads (its MAX_HEADER_SIZE). */
#define SF_MAX_HEADER 100000000u

/* Parses the header JSON in `r` exactly as strictly as the reference implementation (the
   `safetensors` package's serde_json): a tensor is an object with "dtype", "shape" and
   "data_offsets" (other keys are skipped) or the array [dtype, shape, data_offsets]; a dtype is
   a name the reference knows, or {"NAME": null}; "__metadata__" is null or an object of
   strings; a tensor named twice is its last definition. False (with r->message) when it is
   malformed. `h` must be freed with sf_header_free either way. The offsets are checked by the
   caller (sf_check_layout). */
bool sf_parse_header(json_reader *r, sf_header *h);
void sf_header_free(sf_header *h);
/* The header's tensor called `name`, or NULL. */
const sf_tensor *sf_find(const sf_header *h, const char *name);
/* Checks that the tensors' data_offsets, in order, cover the `data_len` bytes of data exactly:
   no overlap, no hole, nothing after the last (as the reference does); a message in `message`
   (of `cap` bytes) when they do not. */
bool sf_check_layout(const sf_header *h, size_t data_len, char *message, size_t cap);

/* Checks the caller's entries for function `fn` (names, dtypes, shapes, data pointers, no name
   twice) and sets bytes[i] to the size of entry i. *sorted (malloc'd, freed by the caller) gets
   the entries sorted by name, for sf_find_entry. INVALID_ARGUMENT or OUT_OF_MEMORY otherwise. */
dlrt_status sf_check_entries(const char *fn, const dlrt_tensor *ts, size_t n, size_t *bytes,
                             const dlrt_tensor ***sorted);
/* The entry called `name` among `sorted` (from sf_check_entries), or NULL. */
const dlrt_tensor *sf_find_entry(const dlrt_tensor **sorted, size_t n, const char *name);
/* The index of the first byte of `data` that is neither 0 nor 1, or `bytes` when none is. */
size_t sf_first_bad_bool(const unsigned char *data, size_t bytes);

/* safetensors_temp.c. Creates the temporary file of a save to `path` (write-only, mode 0666
   less the umask), exclusively and not through a symbolic link, with random bits from `draw`
   (sf_random; tests pass their own); its name (malloc'd) in *name. The descriptor, or -1 with
   errno set. */
int sf_temp_create(const char *path, uint64_t (*draw)(void), char **name);
/* 64 random bits (getrandom, else the clock, the pid and a counter). */
uint64_t sf_random(void);
/* Removes the temporary files of saves to `path` that processes of this host which no longer
   exist left behind (best effort; errno is kept). */
void sf_remove_stale_temps(const char *path);
/* Syncs the directory holding `path`, so a rename survives a crash (best effort). */
void sf_sync_directory(const char *path);

#endif /* DLRT_SAFETENSORS_H_ */
