/* classify.c: classifies one 8x8 digit image with the model library that telc builds from
   samples/digits.tel, using nothing but the generated digits.h (and the dlrt.h it includes)
   and digits.so. It creates a model, loads saved parameters into it, runs inference and
   prints the predicted digit and the probability of each class.

   usage: classify PARAMS.safetensors [IMAGE]

   PARAMS is a file of parameters saved with Model.save (Python) or digits_save (C). IMAGE is a
   text file of 64 numbers separated by white space: the model's input, the image's pixels row
   by row, scaled to [0, 1] as in training. Without IMAGE, or with "-", they are read from
   standard input. Exit status: 0 on success, 1 on any error.

   samples/c/README.md has the commands that build the library, train the model and compile
   and run this program. */

#include <stdio.h>
#include <string.h>

#include "digits.h"

enum { PIXELS = 8 * 8, CLASSES = 10 };

static const char USAGE[] =
    "usage: classify PARAMS.safetensors [IMAGE]\n"
    "Classifies an 8x8 digit image with the digits model and its saved parameters.\n"
    "IMAGE: a text file of 64 numbers (pixels scaled to [0, 1]); '-' or none reads stdin.\n";

/* Reports a failed library call with the runtime's message (it names the function and, for
   a bad argument, the argument) and returns the program's exit status for errors. */
static int fail(dlrt_status status) {
    fprintf(stderr, "classify: %s (status %d)\n", dlrt_last_error(), (int)status);
    return 1;
}

/* Reads exactly PIXELS numbers from `in` into `image`; `name` names the input in messages.
   Returns 0, or prints what is wrong and returns 1. */
static int read_image(FILE *in, const char *name, float image[PIXELS]) {
    for (int i = 0; i < PIXELS; ++i) {
        int got = fscanf(in, "%f", &image[i]);
        if (got != 1) {
            fprintf(stderr, "classify: %s: expected %d numbers, but %s after %d\n", name, PIXELS,
                    got == EOF ? "the input ends" : "found something else", i);
            return 1;
        }
    }
    char extra;
    if (fscanf(in, " %c", &extra) == 1) {
        fprintf(stderr, "classify: %s: more than %d numbers\n", name, PIXELS);
        return 1;
    }
    return 0;
}

/* Reads the image from the file `path`, or from standard input when `path` is "-". */
static int read_image_file(const char *path, float image[PIXELS]) {
    if (strcmp(path, "-") == 0) return read_image(stdin, "standard input", image);
    FILE *in = fopen(path, "r");
    if (in == NULL) {
        perror(path);
        return 1;
    }
    int result = read_image(in, path, image);
    fclose(in);
    return result;
}

/* The buffers of this program hold one image, so the library must have been built with
   `-D B=1`. digits.h gives the shapes only in comments; the manifest (JSON whose layout
   docs/c-abi.md fixes) has them, so the check reads it. A library built for batches of 32
   would otherwise write 32 rows of probabilities into room for one. */
static int built_for_one_image(void) {
    static const char infer_one_image[] =
        "\"symbol\": \"digits_infer\", "
        "\"inputs\": [{\"name\": \"x\", \"dtype\": \"f32\", \"shape\": [1, 64]}]";
    return strstr(digits_manifest(), infer_one_image) != NULL;
}

/* Loads the parameters into `model`, then computes the class probabilities of `image`. */
static int classify(digits_model *model, const char *params, const float image[PIXELS],
                    float probabilities[CLASSES]) {
    dlrt_status status = digits_load(model, params);
    if (status != DLRT_OK) return fail(status);
    status = digits_infer(model, image, probabilities);
    if (status != DLRT_OK) return fail(status);
    return 0;
}

/* Prints the most probable digit, then every probability to six significant digits (so that
   the tiny ones show too). */
static void print_prediction(const float probabilities[CLASSES]) {
    int best = 0;
    for (int digit = 1; digit < CLASSES; ++digit)
        if (probabilities[digit] > probabilities[best]) best = digit;
    printf("digit: %d\n", best);
    printf("probabilities:\n");
    for (int digit = 0; digit < CLASSES; ++digit)
        printf("  %d  %.6g\n", digit, probabilities[digit]);
}

int main(int argc, char **argv) {
    if (argc < 2 || argc > 3) {
        fputs(USAGE, stderr);
        return 1;
    }
    const char *params = argv[1];
    float image[PIXELS];
    if (read_image_file(argc == 3 ? argv[2] : "-", image) != 0) return 1;
    if (!built_for_one_image()) {
        fprintf(stderr, "classify: this digits library is not built for one image;"
                        " rebuild it with `telc build samples/digits.tel -D B=1`\n");
        return 1;
    }

    /* The seed only decides the initial parameters, which the saved ones replace. */
    digits_model *model = NULL;
    dlrt_status status = digits_create("cpu", 0, &model);
    if (status != DLRT_OK) return fail(status);

    float probabilities[CLASSES];
    int result = classify(model, params, image, probabilities);
    if (result == 0) print_prediction(probabilities);
    digits_destroy(model);
    return result;
}
