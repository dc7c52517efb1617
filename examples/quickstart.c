/* quickstart.c: save a tensor, restore it. Usage: ./quickstart STORE (created if missing).
 * Build: cc quickstart.c $(pkg-config --cflags --libs libckpt) -o quickstart */
#include <ckpt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(const char *what, int rc)
{
	fprintf(stderr, "%s: %s (%s)\n", what, ckpt_errmsg(), ckpt_strerror(rc));
	return rc;
}

/* Saves weights as the step after the newest checkpoint (so every run adds one), then reads the
 * newest checkpoint back into out. Returns 0 or a negative CKPT_E_* code. */
static int save_and_restore(ckpt_store *store, const void *weights, void *out)
{
	uint64_t shape[2] = {4096, 4096}, step = 0;
	uint64_t nbytes = shape[0] * shape[1] * ckpt_dtype_size(CKPT_DTYPE_BF16);
	if (ckpt_store_resolve(store, CKPT_STEP_LATEST, &step) == 0)
		step++;
	ckpt_save *save;
	int rc = ckpt_save_begin(store, step, NULL, &save);     /* takes the writer lock */
	if (rc)
		return failed("save", rc);
	ckpt_tensor t = {.struct_size = sizeof t, .name = "layer.0.weight",
			 .dtype = CKPT_DTYPE_BF16, .ndim = 2, .shape = shape,
			 .mem = CKPT_MEM_HOST, .data = weights};
	if ((rc = ckpt_save_add(save, &t)) || (rc = ckpt_save_set_meta(save, "lr", "3e-4"))) {
		ckpt_save_abort(save);
		return failed("save", rc);
	}
	ckpt_stats st = {.struct_size = sizeof st};
	if ((rc = ckpt_save_commit(save, &st)))                 /* durable and visible at 0 */
		return failed("save", rc);
	printf("step %llu: %llu new chunks of %llu\n", (unsigned long long)step,
	       (unsigned long long)st.chunks_new, (unsigned long long)st.chunks);

	ckpt_reader *r;
	if ((rc = ckpt_reader_open(store, CKPT_STEP_LATEST, 0, &r)))
		return failed("open checkpoint", rc);
	long idx = ckpt_reader_find(r, "layer.0.weight");      /* index, or -CKPT_E_NOTFOUND */
	rc = idx < 0 ? (int)idx : ckpt_reader_read(r, (size_t)idx, NULL, CKPT_MEM_HOST, out, nbytes);
	if (rc)
		failed("restore", rc);
	ckpt_reader_close(r);
	return rc;
}

int main(int argc, char **argv)
{
	size_t nbytes = (size_t)4096 * 4096 * 2;
	uint16_t *weights = malloc(nbytes), *back = calloc(1, nbytes);
	if (argc != 2 || !weights || !back) {
		fprintf(stderr, argc != 2 ? "usage: quickstart STORE\n" : "out of memory\n");
		return 2;
	}
	uint32_t x = 1;
	for (size_t i = 0; i < nbytes / 2; i++)
		weights[i] = (uint16_t)((x = x * 1664525u + 1013904223u) >> 16);

	ckpt_options *o = ckpt_options_create();
	ckpt_store *store = NULL;
	int rc = o ? ckpt_options_set(o, CKPT_OPT_CREATE, 1) : -CKPT_E_NOMEM;
	if (rc == 0 && (rc = ckpt_store_open(argv[1], o, &store)))
		failed("open", rc);
	ckpt_options_free(o);
	if (rc == 0 && (rc = save_and_restore(store, weights, back)) == 0 &&
	    memcmp(weights, back, nbytes) != 0) {
		fprintf(stderr, "restore: the tensor came back different\n");
		rc = -1;
	}
	ckpt_store_close(store);
	free(weights);
	free(back);
	return rc ? 1 : 0;
}
